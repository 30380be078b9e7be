#!/usr/bin/env bash
# Train the embedded drafter end to end on one CUDA GPU in about ten minutes, then export
# the best held-out checkpoint to assets/drafter (DFlash format).
#   1. self-distillation: the target's greedy responses to the training prompts with its
#      tapped hidden states (large batches; stopped after 4 minutes, finished shards stay);
#   2. training for 4 minutes (the held-out shard is generated first if missing).
# Usage: scripts/train_gpu.sh [RUN_DIR]   (default runs/gpu; PYTHON overrides the interpreter)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
RUN="${1:-runs/gpu}"
mkdir -p "$RUN"

timeout 240 "$PY" -m libraspec.train.selfdistill --out "$RUN/sd" --device cuda --batch-size 256 \
    --threads 8 --max-new-tokens 192 || [ $? -eq 124 ]

"$PY" -m libraspec.train --data "$RUN/sd" --out "$RUN/train" --heldout "$RUN/heldout.pt" \
    --device cuda --threads 8 --minutes 4 --block-size 8 --seqs 32 --blocks 32 --lr 2e-3 \
    --warmup-steps 100 --eval-minutes 0.5 --ckpt-minutes 1 --refresh-minutes 60 --export assets/drafter
