#!/usr/bin/env bash
# Installs everything and starts the app on the embedded default pair (127.0.0.1:7860).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export GRADIO_ANALYTICS_ENABLED=False HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1}
exec .venv/bin/python app.py "$@"
