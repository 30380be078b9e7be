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
#   train      distillation training, resumed from $WORK/run/state.pt;
#   reveal     issue 46's fine-tune for iterative unmasking (the fastdllm drafter): the shipped drafter,
#              warm-started, half the batches with part of each block revealed (--reveal-frac 0.5),
#              MINUTES (60) on one thread, resumed from $WORK/reveal/state.pt; final weights in
#              $WORK/reveal/last (never assets/drafter: the single-pass monitor decides nothing here);
#   ab         the A/B of assets/TRAINING.md instead of `train`: two arms side by side, one thread each,
#              both warm-started from assets/drafter with --distill, the same MINUTES, taps without and
#              with the last layer ($WORK/ab-taps5, $WORK/ab-taps6, resumed), then each arm's final
#              weights ($WORK/ab-taps*/last; the monitor's best can be the warm start itself) and the
#              shipped drafter evaluated on the public prompts and the held-out set ($WORK/eval-*; an
#              evaluation whose README exists is not run again).
# Usage: scripts/train_drafter.sh STAGE [STAGE ...]   (all four in order: scripts/train_drafter.sh all)
# Environment: WORK (default ~/.cache/libraspec/train-v2), MAGPIE_COUNT (20000), MINUTES (train: 600, ab: 60; the
# training budget, kept across resumes), TAPS (1,8,14,20,27,29), DISTILL (0.5), EVAL_SUITES and EVAL_LIMIT (ab's
# evaluation: gsm8k,humaneval,mtbench,math500,heldout and 16 prompts each), PYTHON.
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
                --out "$SELFGEN/magpie_ids" --batch-size 48 --threads 1 & first=$!
            "$PY" -m libraspec.train.selfdistill --ids-only --out "$SELFGEN/template_ids" --batch-size 48 --threads 1 &
            last=$!; wait "$first"; wait "$last" ;;  # a bare `wait` would hide a failed generator
        features)
            "$PY" -m libraspec.train.features --ids "$SELFGEN/magpie_ids" "$SELFGEN/template_ids" \
                --out "$WORK/features" --taps "$TAPS" --threads 2 ;;
        train)
            "$PY" -m libraspec.train --data "$WORK/features" --out "$WORK/run" --minutes "${MINUTES:-600}" --resume \
                --taps "$TAPS" --distill "${DISTILL:-0.5}" --block-size 8 --blocks 24 --lr 2e-3 --warmup-steps 50 \
                --threads 2 --export "$WORK/exported" ;;
        reveal)
            "$PY" -m libraspec.train --data "$WORK/features" --out "$WORK/reveal" --minutes "${MINUTES:-60}" --resume \
                --init-from assets/drafter --taps 1,8,14,20,27 --distill "${DISTILL:-0.5}" --block-size 8 --blocks 24 \
                --lr 1e-3 --warmup-steps 50 --threads 1 --reveal-frac 0.5 --min-shards 2 \
                --export "$WORK/reveal/best" --export-last "$WORK/reveal/last" ;;
        ab)
            pids=()
            for arm in "5:1,8,14,20,27" "6:1,8,14,20,27,29"; do
                "$PY" -m libraspec.train --data "$WORK/features" --out "$WORK/ab-taps${arm%%:*}" \
                    --minutes "${MINUTES:-60}" \
                    --resume --init-from assets/drafter --taps "${arm#*:}" --distill "${DISTILL:-0.5}" --block-size 8 \
                    --blocks 24 --lr 1e-3 --warmup-steps 50 --threads 1 --export "$WORK/ab-taps${arm%%:*}/exported" \
                    --export-last "$WORK/ab-taps${arm%%:*}/last" &
                pids+=($!)
            done
            for pid in "${pids[@]}"; do wait "$pid"; done  # each arm's failure stops the stage
            for arm in shipped:assets/drafter taps5:"$WORK/ab-taps5/last" taps6:"$WORK/ab-taps6/last"; do
                [ -e "$WORK/eval-${arm%%:*}/README.md" ] && continue  # evaluated by an earlier invocation
                "$PY" -m libraspec.train.evaluate --suites "${EVAL_SUITES:-gsm8k,humaneval,mtbench,math500,heldout}" \
                    --limit "${EVAL_LIMIT:-16}" \
                    --drafter "${arm#*:}" --out "$WORK/eval-${arm%%:*}" --threads 2
            done ;;
        all)
            for s in prompts responses features train; do stage "$s"; done ;;
        *)
            echo "unknown stage $1 (prompts, responses, features, train, reveal, ab, all)" >&2; exit 2 ;;
    esac
}

[ $# -gt 0 ] || { sed -n '2,21p' "$0"; exit 2; }
for s in "$@"; do stage "$s"; done
