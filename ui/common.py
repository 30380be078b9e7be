"""What the tabs share: the model queue and the example prompts."""
from __future__ import annotations

import json
from pathlib import Path

EXAMPLES_PATH = Path(__file__).resolve().parents[1] / "assets" / "examples.json"
QUEUE = dict(concurrency_id="model", concurrency_limit=1)  # every model call, one at a time


def load_examples() -> list[dict]:
    with open(EXAMPLES_PATH) as handle:
        return json.load(handle)

