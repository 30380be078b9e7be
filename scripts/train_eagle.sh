#!/usr/bin/env bash
# The EAGLE-3-style head's recipe on this CPU (assets/TRAINING.md, "The EAGLE-3-style head"). One
# command per stage; each resumes where it stopped (a session ends after 180 minutes):
#   features  the target's tapped features (layers 1, 14, 27) and top-32 after every token of the
#             committed self-generated answers (assets/selfgen/*_ids; never the evaluation suites),
#             one teacher-forced forward per shard ($WORK/features; a shard that exists is kept);
#   train     distillation with the training-time test (3 unrolled steps), MINUTES (80) of training
#             time on THREADS (1) kept across resumes, from $WORK/run/state.pt; shards the features
#             stage writes meanwhile join at each evaluation, so both can run side by side, a thread
#             each (`scripts/train_eagle.sh features & scripts/train_eagle.sh train`); the best
#             held-apart weights go to $WORK/best, the last to $WORK/run/last;
#   ship      copies $WORK/best to assets/eagle (what the embedded pair loads).
# Usage: scripts/train_eagle.sh STAGE [STAGE ...]   (features, train and ship in order: scripts/train_eagle.sh all)
# Environment: WORK (default ~/.cache/libraspec/eagle), MINUTES (80), THREADS (1), PYTHON.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
WORK="${WORK:-$HOME/.cache/libraspec/eagle}"
SELFGEN=assets/selfgen
export GRADIO_ANALYTICS_ENABLED=False HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
mkdir -p "$WORK"

stage() {
    case "$1" in
        features)
            "$PY" -m libraspec.train.features --ids "$SELFGEN/magpie_ids" "$SELFGEN/template_ids" \
                --out "$WORK/features" --taps 1,14,27 --threads "${THREADS:-1}" ;;
        train)
            "$PY" -m libraspec.train.eagle --data "$WORK/features" --out "$WORK/run" --minutes "${MINUTES:-80}" \
                --resume --threads "${THREADS:-1}" --lr 2e-3 --export "$WORK/best" ;;
        ship)
            [ -e "$WORK/best/model.safetensors" ] || { echo "no trained head in $WORK/best: run the train stage" >&2; exit 1; }
            mkdir -p assets/eagle && cp "$WORK/best/config.json" "$WORK/best/model.safetensors" assets/eagle/ ;;
        all)
            for s in features train ship; do stage "$s"; done ;;
        *)
            echo "unknown stage $1 (features, train, ship, all)" >&2; exit 2 ;;
    esac
}

[ $# -gt 0 ] || { sed -n '2,15p' "$0"; exit 2; }
for s in "$@"; do stage "$s"; done
