"""The layer rule of tests/conftest.py: a test file without a declared layer fails collection, a
test takes its file's layer or its own layer marker, and `-m` selects by that one layer (a nested
pytest over copies of the conftest)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

LAYER = "unit"  # tests/conftest.py

TESTS = Path(__file__).resolve().parent


def collect(tmp_path: Path, body: str, *args: str) -> subprocess.CompletedProcess:
    for name in ("conftest.py", "apptools.py"):
        shutil.copy(TESTS / name, tmp_path / name)
    (tmp_path / "test_new.py").write_text(body)
    command = [
        sys.executable,
        "-m",
        "pytest",
        "--co",
        "-q",
        "-p",
        "no:cacheprovider",
        "--rootdir",
        str(tmp_path),
        "-c",
        str(TESTS.parent / "pyproject.toml"),
        *args,
        str(tmp_path),
    ]
    return subprocess.run(command, cwd=TESTS.parent, capture_output=True, text=True, timeout=120)


def test_a_file_without_a_layer_fails_collection(tmp_path):
    done = collect(tmp_path, "def test_x():\n    pass\n")
    assert done.returncode != 0 and "test_new.py declares no test layer" in done.stdout + done.stderr


def test_a_test_keeps_its_own_layer_and_selection_follows_it(tmp_path):
    body = (
        'import pytest\n\nLAYER = "unit"\n\n\n'
        "@pytest.mark.app\ndef test_ui():\n    pass\n\n\n"
        "def test_lib():\n    pass\n"
    )
    unit, app = collect(tmp_path, body, "-m", "unit"), collect(tmp_path, body, "-m", "app")
    assert unit.returncode == app.returncode == 0, unit.stdout + app.stdout
    assert "test_lib" in unit.stdout and "test_ui" not in unit.stdout
    assert "test_ui" in app.stdout and "test_lib" not in app.stdout
