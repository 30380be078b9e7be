"""Load test: the app on a free 127.0.0.1 port, N concurrent gradio_client users x M races.

    python scripts/load_test.py [--users 8] [--requests 3] [--tokens 32] [--model tiny-llama]
                                [--timeout 900] [--json OUT.json]

Every request must finish without error, with three equal greedy texts (static, LibraSpec,
oracle decode the target's own output) and a finished summary. Prints latency percentiles
(end to end, waiting in the queue, processing) and the queue seen by the clients (largest
queue size and rank reported, and the longest overlap of two requests' processing: the app's
one model queue has concurrency_limit 1, so that overlap is only message delay). Bounded:
`--timeout` caps the whole test and each request.
Exit status 0 only when every request succeeded; 1 otherwise (the failures are listed).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
POLL_S = 0.02


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_app(model: str, port: int, cache: str) -> subprocess.Popen:
    env = dict(
        os.environ,
        LIBRASPEC_MODEL=model,
        LIBRASPEC_CACHE=cache,
        GRADIO_SERVER_NAME="127.0.0.1",
        GRADIO_SERVER_PORT=str(port),
        GRADIO_ANALYTICS_ENABLED="False",
        HF_HUB_OFFLINE="1",
    )
    env.setdefault("OMP_NUM_THREADS", "1")
    env.pop("LIBRASPEC_PAIRS", None)
    return subprocess.Popen(
        [sys.executable, str(ROOT / "app.py")],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_until_up(url: str, app: subprocess.Popen, limit_s: float) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if app.poll() is not None:
            raise RuntimeError(f"the app exited with status {app.returncode}: {app.stderr.read()[-2000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            time.sleep(0.25)
    raise RuntimeError(f"the app did not answer at {url} within {limit_s:.0f} s")


def user(url: str, index: int, requests: int, tokens: int, deadline: float, results: list, lock) -> None:
    """One client: `requests` races in a row; each result records its timings and queue view."""
    from gradio_client import Client

    client = Client(url, verbose=False)
    for k in range(requests):
        prompt = f"User {index}, request {k}: tell me a short story about a lighthouse."
        entry = {"user": index, "request": k, "error": None, "max_rank": None, "max_queue": None}
        start = time.monotonic()
        try:
            job = client.submit(prompt, 2.2, 24, 0, 0.0, tokens, 0, api_name="/race")
            started = None
            while not job.done():
                if time.monotonic() > deadline:
                    job.cancel()
                    raise TimeoutError("request still running at the test's time limit")
                status = job.status()
                if status.rank is not None:
                    entry["max_rank"] = max(entry["max_rank"] or 0, int(status.rank))
                if status.queue_size is not None:
                    entry["max_queue"] = max(entry["max_queue"] or 0, int(status.queue_size))
                if started is None and status.code.name in ("PROCESSING", "ITERATING", "PROGRESS"):
                    started = time.monotonic()
                time.sleep(POLL_S)
            static, libraspec, oracle, summary = job.result(timeout=max(1.0, deadline - time.monotonic()))
            end = time.monotonic()
            started = started or end
            if not (static == libraspec == oracle) or not summary.get("finished"):
                raise AssertionError(f"greedy texts differ or the race did not finish: {summary.get('notes')}")
            if summary["modes"]["libraspec"]["tokens"] != summary["ar"]["tokens"]:
                raise AssertionError("LibraSpec and AR committed different token counts")
            entry.update(
                total_s=end - start,
                wait_s=started - start,
                run_s=end - started,
                start=start,
                processing_from=started,
                end=end,
                tokens=summary["ar"]["tokens"],
            )
        except Exception as error:  # noqa: BLE001  (any failure of a request fails the test; it is listed)
            entry["error"] = f"{type(error).__name__}: {error}"
        with lock:
            results.append(entry)


def percentiles(values: list[float]) -> dict:
    if not values:
        return {"p50": None, "p90": None, "max": None}
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]
    return {"p50": statistics.median(ordered), "p90": p90, "max": ordered[-1]}


def longest_overlap(intervals: list[tuple[float, float]]) -> float:
    """Longest time two processing intervals overlap, in seconds (client clocks).

    With one request processed at a time this is only the delay of status and result
    messages (well under a second); two concurrent races would overlap for most of a race.
    """
    ordered = sorted(intervals)
    best, reach = 0.0, float("-inf")
    for a, b in ordered:
        best = max(best, min(b, reach) - a)
        reach = max(reach, b)
    return max(best, 0.0)


def run(args) -> dict:
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    with tempfile.TemporaryDirectory(prefix="libraspec-load-") as cache:
        app = start_app(args.model, port, cache)
        try:
            began = time.monotonic()
            wait_until_up(url, app, min(180.0, args.timeout))
            up_s = time.monotonic() - began
            deadline = time.monotonic() + args.timeout
            results, lock = [], threading.Lock()
            threads = [
                threading.Thread(target=user, args=(url, u, args.requests, args.tokens, deadline, results, lock))
                for u in range(args.users)
            ]
            wall = time.monotonic()
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(max(1.0, deadline - time.monotonic() + 30))
            wall = time.monotonic() - wall
        finally:
            app.terminate()
            try:
                app.wait(timeout=20)
            except subprocess.TimeoutExpired:
                app.kill()
    ok = [r for r in results if r["error"] is None]
    missing = args.users * args.requests - len(results)
    return {
        "model": args.model,
        "users": args.users,
        "requests_per_user": args.requests,
        "tokens": args.tokens,
        "startup_s": up_s,
        "wall_s": wall,
        "completed": len(ok),
        "failed": len(results) - len(ok) + missing,
        "failures": [f"user {r['user']} request {r['request']}: {r['error']}" for r in results if r["error"]]
        + ([f"{missing} requests never returned (threads still running at the time limit)"] if missing else []),
        "latency_s": percentiles([r["total_s"] for r in ok]),
        "queue_wait_s": percentiles([r["wait_s"] for r in ok]),
        "processing_s": percentiles([r["run_s"] for r in ok]),
        "max_queue_size_seen": max((r["max_queue"] or 0 for r in results), default=0),
        "max_rank_seen": max((r["max_rank"] or 0 for r in results), default=0),
        "longest_processing_overlap_s": longest_overlap([(r["processing_from"], r["end"]) for r in ok]),
        # over the races whose processing a poll saw (a race done between two polls has run_s 0)
        "shortest_processing_s": min((r["run_s"] for r in ok if r["run_s"] > 0), default=None),
        "requests_per_minute": 60.0 * len(ok) / wall if wall > 0 else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=8)
    parser.add_argument("--requests", type=int, default=3, help="races per user, one after another")
    parser.add_argument("--tokens", type=int, default=32, help="max new tokens per race")
    parser.add_argument("--model", default=os.environ.get("LIBRASPEC_MODEL", "tiny-llama"))
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds for the whole test")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    if not (1 <= args.users <= 64 and 1 <= args.requests <= 20 and 1 <= args.tokens <= 512):
        parser.error("keep it bounded: 1-64 users, 1-20 requests each, 1-512 tokens")
    report = run(args)
    lat, wait, proc = report["latency_s"], report["queue_wait_s"], report["processing_s"]

    def fmt(p):
        return " / ".join("-" if p[k] is None else f"{p[k]:.2f}" for k in ("p50", "p90", "max"))

    print(
        f"{report['model']}: {args.users} users x {args.requests} races of {args.tokens} tokens; "
        f"app up in {report['startup_s']:.1f} s; wall {report['wall_s']:.1f} s"
    )
    print(
        f"completed {report['completed']}, failed {report['failed']}; "
        f"{report['requests_per_minute'] or 0:.1f} races/min"
    )
    print(f"latency s (p50 / p90 / max):    {fmt(lat)}")
    print(f"queue wait s (p50 / p90 / max): {fmt(wait)}")
    print(f"processing s (p50 / p90 / max): {fmt(proc)}")
    print(
        f"queue: largest size seen {report['max_queue_size_seen']}, largest rank {report['max_rank_seen']}, "
        f"longest overlap of two requests' processing {report['longest_processing_overlap_s']:.2f} s "
        "(client clocks; the model queue runs one race at a time)"
    )
    for line in report["failures"]:
        print("FAILED", line)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0 if report["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
