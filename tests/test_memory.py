"""Reduced memory check (scripts/memory_check.py): 15 sequential races against the app on the
tiny pair; resident memory after race 15 within 10% of after race 5."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_resident_memory_levels_off(tmp_path):
    out = tmp_path / "memory.json"
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "memory_check.py"), "--races", "15", "--baseline", "5",
                           "--tokens", "16", "--model", "tiny-llama", "--timeout", "300", "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    report = json.loads(out.read_text())
    assert done.returncode == 0 and report["passed"], done.stdout + done.stderr
    assert report["races"] == 15 and not report["errors"] and len(report["rss_mb_series"]) == 15
    assert abs(report["growth"]) <= 0.10 and report["rss_mb_after_last"] > 0
