"""How long the app takes to be ready, step by step: imports, building, serving, and the first page
until its status says Ready (loading the pair and its latency profile).

    .venv/bin/python scripts/startup_time.py --cache /tmp/fresh   # cold: an empty (or new) cache folder
    .venv/bin/python scripts/startup_time.py --cache /tmp/fresh   # warm: the same folder again

Uses the pair LIBRASPEC_MODEL names (default: the embedded SmolLM2 pair) and Debian's
/usr/bin/chromium through playwright. Prints one JSON object: seconds per step since the
process started, the load times the app itself reports, whether the cache folder started
empty (cold), torch's thread count and the machine's load average. On a shared machine, set
OMP_NUM_THREADS to the cores that are free: oversubscribed threads make the latency profile,
the longest step, several times slower.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

from browser import page_at, serve

START = time.perf_counter()
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", help="the cache folder (LIBRASPEC_CACHE); default: a new, empty one")
    parser.add_argument("--timeout-s", type=float, default=900.0)
    args = parser.parse_args()
    cache = Path(args.cache or tempfile.mkdtemp(prefix="libraspec-cache-"))
    cold = not cache.exists() or not any(cache.iterdir())
    os.environ["LIBRASPEC_CACHE"] = str(cache)
    for key, value in {"GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1"}.items():
        os.environ.setdefault(key, value)
    steps = {}

    def mark(step: str) -> None:
        steps[step] = round(time.perf_counter() - START, 2)

    import gradio  # noqa: F401
    import torch
    import transformers  # noqa: F401

    mark("imports (torch, transformers, gradio)")
    import app

    mark("import app")
    demo = app.build_demo()
    mark("build_demo")
    url = serve(demo)
    mark("serving")
    try:
        with page_at(url) as page:
            mark("page open")
            page.wait_for_selector("#ls-status:has-text('Ready')", timeout=args.timeout_s * 1000)
            mark("Ready")
            status = page.locator("#ls-status").inner_text()
    finally:
        demo.close()
    reported = {k: float(v) for k, v in re.findall(r"(models|latency profile) ([\d.]+) s", status)}
    print(
        json.dumps(
            {
                "cache": str(cache),
                "cold": cold,
                "steps_s": steps,
                "app_reports_s": reported,
                "threads": torch.get_num_threads(),
                "load_average": os.getloadavg(),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
