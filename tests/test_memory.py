"""Reduced memory check (scripts/memory_check.py): 15 sequential races against the app on the
tiny pair; resident memory after race 15 within 10% of after race 5."""

from __future__ import annotations

import pytest
from apptools import run_script

LAYER = "e2e"  # tests/conftest.py


@pytest.mark.slow
def test_resident_memory_levels_off(tmp_path):
    done, report = run_script("memory_check.py", tmp_path, "--races", "15", "--baseline", "5", "--tokens", "16")
    assert done.returncode == 0 and report["passed"], done.stdout + done.stderr
    assert report["races"] == 15 and not report["errors"] and len(report["rss_mb_series"]) == 15
    assert abs(report["growth"]) <= 0.10 and report["rss_mb_after_last"] > 0
