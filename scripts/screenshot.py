"""Screenshot of the running app for the README: one race, then the Round-inspector tab.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/screenshot.py --out assets/screenshot.png

Uses the pair LIBRASPEC_MODEL names (default: the embedded SmolLM2 pair) and Debian's
/usr/bin/chromium through playwright (never `playwright install`). Writes OUT (the race
tab) and OUT with an `-inspector` suffix (the figures of the same run).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from browser import page_at, serve

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "assets" / "screenshot.png"))
    parser.add_argument("--example", type=int, default=3, help="index into assets/examples.json")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--timeout-s", type=float, default=1800.0)
    args = parser.parse_args()
    prompt = json.loads((ROOT / "assets" / "examples.json").read_text())[args.example]["prompt"]

    import torch

    import app

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    url = serve(app.demo)
    timeout_ms = args.timeout_s * 1000
    out = Path(args.out)
    try:
        with page_at(url) as page:
            page.wait_for_selector("#ls-status:has-text('Ready')", timeout=timeout_ms)
            page.locator("#ls-prompt textarea").fill(prompt)
            box = page.locator("#ls-max-new input[type=number]")
            box.fill(str(args.max_new_tokens))
            box.press("Tab")
            page.locator("#ls-run").click()
            page.wait_for_selector("#ls-status:has-text('Finished')", timeout=timeout_ms)
            page.wait_for_selector("#ls-run:not([disabled])", timeout=timeout_ms)
            page.screenshot(path=str(out), full_page=True)
            page.get_by_role("tab", name="Round inspector").click()
            page.wait_for_function("document.querySelectorAll('.js-plotly-plot').length >= 4", timeout=60_000)
            page.wait_for_timeout(1500)
            page.screenshot(path=str(out.with_name(out.stem + "-inspector" + out.suffix)), full_page=True)
    finally:
        app.demo.close()
    print(out)


if __name__ == "__main__":
    main()
