#!/usr/bin/env bash
# The one-shot GPU check (scripts/gpu_check.py): correctness on CUDA, GPU latency profiles of the
# real pairs' shapes with random weights, and a decode through the hub code path, all written to
# OUT/report.json and OUT/profiles/. Nothing is downloaded or installed.
#   usage: scripts/gpu_check.sh OUT [--dry-run]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 GRADIO_ANALYTICS_ENABLED=False PYTHONUNBUFFERED=1
exec "$PY" scripts/gpu_check.py "$@"
