"""Reduced load test (scripts/load_test.py): 3 concurrent API users on the tiny pair, one race each.

Every request must finish with three equal greedy texts, and the one model queue must run
the races one at a time (their processing overlaps only by message delay).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_three_concurrent_users_all_succeed(tmp_path):
    out = tmp_path / "load.json"
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "load_test.py"), "--users", "3", "--requests", "1",
                           "--tokens", "16", "--model", "tiny-llama", "--timeout", "300", "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(out.read_text())
    assert report["completed"] == 3 and report["failed"] == 0 and not report["failures"]
    assert report["latency_s"]["max"] >= report["latency_s"]["p50"] > 0
    assert report["longest_processing_overlap_s"] < 0.5  # concurrency_limit 1 on the model queue
    assert "latency s (p50 / p90 / max)" in done.stdout
