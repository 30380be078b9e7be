"""scripts/gpu_check.py --dry-run (e2e): the GPU check's every step on tiny shapes on the CPU, so
the script that runs once on a lent GPU never rots. The dry run collects the device tests (they
run in this suite anyway), measures a tiny profile with its concurrency table, writes a z-lab-format
pair, loads it through the hub code path and decodes in every mode."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from libraspec.cost import LatencyProfile
from libraspec.modes import MODES

LAYER = "e2e"  # tests/conftest.py

ROOT = Path(__file__).resolve().parents[1]


def test_the_gpu_check_runs_dry_on_the_cpu(tmp_path):
    done = subprocess.run(
        [sys.executable, "scripts/gpu_check.py", str(tmp_path), "--dry-run"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stdout.startswith("plan (dry run") and "estimate: about" in done.stdout  # the plan comes first
    report = json.loads((tmp_path / "report.json").read_text())
    assert set(report["steps"]) == {"cuda_tests", "device_tests", "profile_tiny", "decode"}
    assert all(step["ok"] for step in report["steps"].values())
    assert "tests collected" in report["steps"]["device_tests"]["summary"]
    for context, entry in report["steps"]["profile_tiny"]["contexts"].items():
        profile = LatencyProfile.from_json(str(tmp_path / entry["file"]))
        assert profile.meta["context_len"] == int(context) and profile.meta["dtype"] == "float32"
        assert profile.tree_rows == (5, 9, 17) and len(profile.verify_s) == 9
        assert set(profile.meta["concurrency"]["seconds"]) == {"1", "2"}
        assert {"torch", "transformers", "attention", "date", "weights"} <= set(profile.meta)
    runs = report["steps"]["decode"]["runs"]
    assert set(runs) == set(MODES) and all(run["equals_ar"] and run["tokens"] == 8 for run in runs.values())
