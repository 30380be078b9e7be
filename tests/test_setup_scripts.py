"""scripts/setup.sh and scripts/test.sh on a stand-in checkout whose python only logs its
arguments: a fresh machine installs everything, a second run installs nothing, a changed
requirements.txt installs again. Nothing is downloaded."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

LAYER = "e2e"  # tests/conftest.py

ROOT = Path(__file__).resolve().parents[1]
LOGGING_PYTHON = '#!/usr/bin/env bash\necho "$*" >> "$CALLS"\n'
BASE_PYTHON = f"""#!/usr/bin/env bash
# "python3 -m venv DIR" makes DIR/bin/python a logging stand-in
echo "venv $3" >> "$CALLS"
mkdir -p "$3/bin"
printf '%s' '{LOGGING_PYTHON}' > "$3/bin/python"
chmod +x "$3/bin/python"
"""


@pytest.fixture
def checkout(tmp_path):
    """A copy of scripts/ and requirements.txt, and a PYTHON that makes logging venvs."""
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "scripts", repo / "scripts")
    shutil.copy(ROOT / "requirements.txt", repo / "requirements.txt")
    base = tmp_path / "python3"
    base.write_text(BASE_PYTHON)
    base.chmod(0o755)
    return repo


def run(repo: Path, script: str, *args: str) -> list[str]:
    """Run scripts/`script`; the calls its python received, one line each."""
    calls = repo.parent / "calls.log"
    calls.unlink(missing_ok=True)
    env = dict(os.environ, PYTHON=str(repo.parent / "python3"), CALLS=str(calls))
    subprocess.run(["bash", f"scripts/{script}", *args], cwd=repo, env=env, check=True, capture_output=True)
    return calls.read_text().splitlines() if calls.exists() else []


def test_setup_installs_once_per_requirements(checkout):
    first = run(checkout, "setup.sh")
    assert first[0] == "venv .venv" and len(first) == 4  # a fresh machine: venv, pip, requirements, SmolLM2
    assert "-m pip install --quiet -r requirements.txt" in first
    assert run(checkout, "setup.sh") == []  # nothing changed: no pip at all
    with open(checkout / "requirements.txt", "a", encoding="utf-8") as handle:
        handle.write("six==1.17.0\n")
    assert len(run(checkout, "setup.sh")) == 3  # a changed requirements.txt installs again (same venv)
    assert run(checkout, "setup.sh") == []
    (checkout / ".venv" / ".setup-stamp").unlink()
    assert len(run(checkout, "setup.sh")) == 3


def test_a_failed_install_is_retried(checkout):
    failing = LOGGING_PYTHON + "exit 1\n"  # every pip call fails
    (checkout.parent / "python3").write_text(BASE_PYTHON.replace(LOGGING_PYTHON, failing))
    with pytest.raises(subprocess.CalledProcessError):
        run(checkout, "setup.sh")
    assert not (checkout / ".venv" / ".setup-stamp").exists()
    (checkout / ".venv" / "bin" / "python").write_text(LOGGING_PYTHON)  # pip works again
    assert len(run(checkout, "setup.sh")) == 3


@pytest.mark.skipif(not os.access("/usr/bin/chromium", os.X_OK), reason="would install chromium with apt-get")
def test_second_test_run_only_runs_pytest(checkout):
    run(checkout, "test.sh", "-m", "unit")
    linted = "libraspec ui app.py tests benchmarks scripts"
    assert run(checkout, "test.sh", "-m", "unit") == [  # ruff's format and lint, then pytest
        f"-m ruff format --check --quiet {linted}",
        f"-m ruff check --quiet {linted}",
        "-m pytest -q -n 2 --dist loadfile -m unit",
    ]
