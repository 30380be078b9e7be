#!/usr/bin/env bash
# The embedded drafter's v2 recipe on this CPU (assets/TRAINING.md). One command per stage, and
# each stage resumes where it stopped (a session ends after 180 minutes and stops every process):
#   prompts    Magpie prompts written by the target (assets/selfgen/magpie/prompts.jsonl);
#   responses  the target's greedy responses, as token ids only, to the Magpie prompts and to the
#              templates (assets/selfgen/magpie_ids, assets/selfgen/template_ids); two processes,
#              one thread each. Prompts and ids are a few bytes a token and are committed, so the
#              CPU-hours of decoding survive a fresh machine;
#   features   tapped features + the target's top-k per position, one teacher-forced pass per
#              shard ($WORK/features, about 7 KB a token, rebuilt on a new machine in minutes);
#   train      distillation training, resumed from $WORK/run/state.pt.
# Usage: scripts/train_drafter.sh STAGE [STAGE ...]   (all four in order: scripts/train_drafter.sh all)
# Environment: WORK (default ~/.cache/libraspec/train-v2), MAGPIE_COUNT (20000), MINUTES (600, the
# training budget, kept across resumes), TAPS (1,8,14,20,27,29), DISTILL (0.5), PYTHON.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
WORK="${WORK:-$HOME/.cache/libraspec/train-v2}"
SELFGEN=assets/selfgen
TAPS="${TAPS:-1,8,14,20,27,29}"
export GRADIO_ANALYTICS_ENABLED=False HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
mkdir -p "$WORK"

stage() {
    case "$1" in
        prompts)
            "$PY" -m libraspec.train.magpie --out "$SELFGEN/magpie" --count "${MAGPIE_COUNT:-20000}" --threads 1 ;;
        responses)
            "$PY" -m libraspec.train.selfdistill --prompts "$SELFGEN/magpie/prompts.jsonl" --ids-only \
                --out "$SELFGEN/magpie_ids" --batch-size 48 --threads 1 &
            "$PY" -m libraspec.train.selfdistill --ids-only --out "$SELFGEN/template_ids" --batch-size 48 --threads 1 &
            wait ;;
        features)
            "$PY" -m libraspec.train.features --ids "$SELFGEN/magpie_ids" "$SELFGEN/template_ids" \
                --out "$WORK/features" --taps "$TAPS" --threads 2 ;;
        train)
            "$PY" -m libraspec.train --data "$WORK/features" --out "$WORK/run" --minutes "${MINUTES:-600}" --resume \
                --taps "$TAPS" --distill "${DISTILL:-0.5}" --block-size 8 --blocks 24 --lr 2e-3 --warmup-steps 50 \
                --threads 2 --export "$WORK/exported" ;;
        all)
            for s in prompts responses features train; do stage "$s"; done ;;
        *)
            echo "unknown stage $1 (prompts, responses, features, train, all)" >&2; exit 2 ;;
    esac
}

[ $# -gt 0 ] || { sed -n '2,15p' "$0"; exit 2; }
for s in "$@"; do stage "$s"; done
