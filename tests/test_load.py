"""Reduced load test (scripts/load_test.py): 3 concurrent API users on the tiny pair, one race each.

Every request must finish with three equal greedy texts, and the one model queue must run
the races one at a time (their processing overlaps only by message delay, under half the shortest
race's processing time).
"""

from __future__ import annotations

import pytest
from apptools import run_script

LAYER = "e2e"  # tests/conftest.py


@pytest.mark.slow
def test_three_concurrent_users_all_succeed(tmp_path):
    done, report = run_script("load_test.py", tmp_path, "--users", "3", "--requests", "1", "--tokens", "48")
    assert done.returncode == 0, done.stdout + done.stderr
    assert report["completed"] == 3 and report["failed"] == 0 and not report["failures"]
    assert report["latency_s"]["max"] >= report["latency_s"]["p50"] > 0
    # concurrency_limit 1 on the model queue: two races overlap only by the delay of their messages, never
    # for most of a race as concurrent ones would (a ratio of two times of one run: no limit in seconds)
    assert report["longest_processing_overlap_s"] < 0.5 * report["shortest_processing_s"]
    assert "latency s (p50 / p90 / max)" in done.stdout
