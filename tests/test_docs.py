"""Every Python example in README.md and docs/ runs (issue 44: the reference's "library in a few
lines" raised TypeError). Each ```python block is executed as written, in a fresh namespace, on the
tiny-llama pair (LIBRASPEC_MODEL) with its own cache; the README's API example calls this module's
app instead of the default address."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

LAYER = "app"  # tests/conftest.py

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
APP_URL = "http://127.0.0.1:7860/"  # the address the README's example calls


def examples() -> list[tuple[str, int, str]]:
    """(file, line, code) of every ```python block of the docs."""
    out = []
    for path in DOCS:
        text = path.read_text()
        for match in re.finditer(r"^```python\n(.*?)^```", text, flags=re.S | re.M):
            out.append((path.name, text[: match.start()].count("\n") + 1, match.group(1)))
    return out


def test_the_docs_hold_the_examples_this_test_runs():
    names = [name for name, _, _ in examples()]
    assert "README.md" in names and "REFERENCE.md" in names, names


@pytest.mark.parametrize("name, line, code", examples(), ids=[f"{n}:{ln}" for n, ln, _ in examples()])
def test_a_docs_example_runs(name, line, code, server, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LIBRASPEC_MODEL", "tiny-llama")
    monkeypatch.setenv("LIBRASPEC_CACHE", str(tmp_path))
    runnable = code.replace(APP_URL, server)
    namespace: dict = {"__name__": f"docs_example_{name}_{line}"}
    exec(compile(runnable, f"{name}:{line}", "exec"), namespace)  # noqa: S102 - the docs' own examples
    printed = capsys.readouterr().out
    assert printed.strip(), f"{name}:{line} printed nothing"
