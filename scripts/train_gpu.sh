#!/usr/bin/env bash
# The v2 drafter recipe of scripts/train_drafter.sh, scaled up for one CUDA GPU with no internet,
# in about eleven minutes; exports the best held-out checkpoint to RUN_DIR/exported (copy it to
# assets/drafter only if `python -m libraspec.train.evaluate` measures it better on the public prompts):
#   1. Magpie prompts written by the target (2 minutes, large batches), decontaminated;
#   2. greedy responses as token ids to those prompts and to the templates (3 minutes);
#   3. features + top-k, one teacher-forced pass per shard;
#   4. distillation training for 4 minutes (the held-out shard is generated first).
# A stage stopped by its time limit keeps its finished shards. Committed data under assets/selfgen
# is used too (copied in, never modified).
# Usage: scripts/train_gpu.sh [RUN_DIR]   (default runs/gpu; PYTHON overrides the interpreter)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
RUN="${1:-runs/gpu}"
TAPS="${TAPS:-1,8,14,20,27,29}"
export GRADIO_ANALYTICS_ENABLED=False HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
mkdir -p "$RUN"
for part in magpie magpie_ids template_ids; do
    [ -d "assets/selfgen/$part" ] && [ ! -e "$RUN/$part" ] && cp -r "assets/selfgen/$part" "$RUN/$part"
done

timeout 120 "$PY" -m libraspec.train.magpie --out "$RUN/magpie" --count 100000 --device cuda --batch-size 512 \
    --threads 8 || [ $? -eq 124 ]
timeout 90 "$PY" -m libraspec.train.selfdistill --prompts "$RUN/magpie/prompts.jsonl" --ids-only \
    --out "$RUN/magpie_ids" --device cuda --batch-size 256 --threads 8 --max-new-tokens 192 || [ $? -eq 124 ]
timeout 90 "$PY" -m libraspec.train.selfdistill --ids-only --out "$RUN/template_ids" --device cuda \
    --batch-size 256 --threads 8 --max-new-tokens 192 || [ $? -eq 124 ]
timeout 90 "$PY" -m libraspec.train.features --ids "$RUN/magpie_ids" "$RUN/template_ids" --out "$RUN/features" \
    --taps "$TAPS" --device cuda --batch-size 32 --threads 8 || [ $? -eq 124 ]

"$PY" -m libraspec.train --data "$RUN/features" --out "$RUN/train" --heldout "$RUN/heldout.pt" \
    --device cuda --threads 8 --minutes 4 --block-size 8 --seqs 32 --blocks 32 --lr 2e-3 --taps "$TAPS" \
    --distill 0.5 --warmup-steps 100 --eval-minutes 0.5 --ckpt-minutes 1 --refresh-minutes 60 \
    --export "$RUN/exported"
