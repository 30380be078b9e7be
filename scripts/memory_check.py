"""Memory check: sequential races against the app; its resident memory must level off.

    python scripts/memory_check.py [--races 50] [--baseline 5] [--tokens 32] [--model tiny-llama]
                                   [--tolerance 0.10] [--timeout 900] [--json OUT.json]

Starts the app (scripts/load_test.py's launcher: a free 127.0.0.1 port, a fresh profile
cache), sends `--races` races one after another through gradio_client, each with a new
prompt (so the app's AR-baseline cache and stored runs fill up to their caps), and reads
the app process's resident set size (psutil) after every race. Passes when the RSS after
the last race is within `--tolerance` (relative) of the RSS after race `--baseline`.
Prints the figures; exit status 0 on a pass, 1 on growth beyond the tolerance or any error.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from load_test import free_port, start_app, wait_until_up  # noqa: E402

MB = 1024 * 1024


def rss_mb(pid: int) -> float:
    """Resident memory of the app process and any children it started, in MiB."""
    process = psutil.Process(pid)
    return sum(p.memory_info().rss for p in [process, *process.children(recursive=True)]) / MB


def run(args) -> dict:
    from gradio_client import Client

    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    series, errors = [], []
    with tempfile.TemporaryDirectory(prefix="libraspec-memory-") as cache:
        app = start_app(args.model, port, cache)
        try:
            wait_until_up(url, app, min(180.0, args.timeout))
            client = Client(url, verbose=False)
            started_mb = rss_mb(app.pid)
            deadline = time.monotonic() + args.timeout
            for i in range(args.races):
                if time.monotonic() > deadline:
                    errors.append(f"time limit reached after {i} races")
                    break
                prompt = f"Race {i}: describe a city at night in a few sentences."
                try:
                    texts = client.predict(prompt, 2.2, 24, 0, 0.0, args.tokens, i, "", api_name="/race")
                    if not (texts[0] == texts[1] == texts[2]) or not texts[3]["finished"]:
                        errors.append(f"race {i + 1}: greedy texts differ or the race did not finish")
                except Exception as error:  # noqa: BLE001  (any failed race fails the check; it is listed)
                    errors.append(f"race {i + 1}: {type(error).__name__}: {error}")
                series.append(rss_mb(app.pid))
        finally:
            app.terminate()
            try:
                app.wait(timeout=20)
            except subprocess.TimeoutExpired:  # a server that will not stop is killed
                app.kill()
    base = series[args.baseline - 1] if len(series) >= args.baseline else None
    last = series[-1] if series else None
    growth = (last - base) / base if base and last else None
    return {
        "model": args.model,
        "races": len(series),
        "tokens": args.tokens,
        "baseline_race": args.baseline,
        "rss_mb_at_start": started_mb if series else None,
        "rss_mb_after_baseline": base,
        "rss_mb_after_last": last,
        "rss_mb_max": max(series) if series else None,
        "growth": growth,
        "tolerance": args.tolerance,
        "rss_mb_series": series,
        "errors": errors,
        "passed": not errors and growth is not None and growth <= args.tolerance and len(series) == args.races,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--races", type=int, default=50)
    parser.add_argument("--baseline", type=int, default=5, help="compare the last race with this one")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--model", default="tiny-llama")
    parser.add_argument("--tolerance", type=float, default=0.10)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds for all races")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    if not (1 <= args.baseline < args.races <= 500 and 1 <= args.tokens <= 512 and args.tolerance > 0):
        parser.error("need 1 <= baseline < races <= 500, 1-512 tokens and a positive tolerance")
    report = run(args)
    if report["races"]:
        series = report["rss_mb_series"]
        marks = sorted({1, args.baseline, len(series) // 2, len(series)})
        print(f"{report['model']}: {report['races']} sequential races of {args.tokens} tokens")
        print(
            f"RSS MiB: at start {report['rss_mb_at_start']:.1f}; "
            + "; ".join(f"after race {k} {series[k - 1]:.1f}" for k in marks if k >= 1)
            + f"; max {report['rss_mb_max']:.1f}"
        )
    if report["growth"] is not None:
        print(
            f"growth from race {args.baseline} to race {report['races']}: {100 * report['growth']:+.2f}% "
            f"(tolerance {100 * args.tolerance:.0f}%): {'PASS' if report['passed'] else 'FAIL'}"
        )
    for line in report["errors"]:
        print("FAILED", line)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
