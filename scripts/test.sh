#!/usr/bin/env bash
# Installs everything (venv, pinned packages, Debian chromium for the browser test), checks the
# format and lint (ruff) and runs the test suite; arguments go to pytest (e.g. `-m unit` for the
# fast library tests). This is the README's test command and what CI runs. On a second run
# nothing is installed again: setup.sh skips pip while requirements.txt is unchanged, and
# chromium is kept once present.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ ! -x /usr/bin/chromium ] && command -v apt-get >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
export GRADIO_ANALYTICS_ENABLED=False HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# the format and the lint rules of pyproject.toml hold before any test runs
LINTED="libraspec ui app.py tests benchmarks scripts"
.venv/bin/python -m ruff format --check --quiet $LINTED
.venv/bin/python -m ruff check --quiet $LINTED
# two workers (pytest-xdist), each test file in one of them so module fixtures are built once:
# on this project's 2-core machine the whole suite took 335-384 s on two, idle, and 548-566 s with a
# busy loop holding one core (2026-12-08; 302-369 s on two and 575 s on one worker on an earlier day)
exec .venv/bin/python -m pytest -q -n 2 --dist loadfile "$@"
