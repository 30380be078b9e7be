"""Shared fixtures (one local app per test module, tiny-llama pair, and its API client) and
the test layers.

Every test file declares its layer, one of the markers in pyproject.toml, as `LAYER = "unit"`:
- unit: the library on tiny random models, no server, browser or embedded model
  (`pytest -m unit` is the fast run);
- app: the Gradio app and its ui/ helpers on the tiny pair;
- e2e: a real browser, the embedded SmolLM2 pair, or scripts/ run as subprocesses.
Each test gets its file's layer as a marker, unless it carries a layer marker itself (a unit file's
test that imports ui/ is `@pytest.mark.app`). A test file that declares no layer fails collection,
so a new file never lands in a layer by accident.
"""

from __future__ import annotations

import os

import pytest
from apptools import tiny_app

LAYERS = ("unit", "app", "e2e")


def pytest_configure(config):
    """Under pytest-xdist (scripts/test.sh runs two workers on this 2-core machine) each worker keeps
    one torch thread: two workers of two threads each oversubscribe the cores, which made the
    small forwards of the exact-enumeration tests 20 times slower."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        torch.set_num_threads(1)


def layer_of(item: pytest.Item) -> str:
    declared = getattr(item.module, "LAYER", None)
    if declared not in LAYERS:
        raise pytest.UsageError(
            f'{item.path.name} declares no test layer: add `LAYER = "unit"` (or app, e2e) after its imports '
            f"(tests/conftest.py); it declares {declared!r}"
        )
    own = [mark.name for mark in item.iter_markers() if mark.name in LAYERS]
    if len(set(own)) > 1:
        raise pytest.UsageError(f"{item.nodeid} has the layer markers {own}; a test belongs to one layer")
    return own[0] if own else declared


def pytest_collection_modifyitems(config, items):
    for item in items:
        item.add_marker(layer_of(item))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The app's URL on a free 127.0.0.1 port (tiny-llama pair, n = 7, context 512)."""
    with tiny_app(tmp_path_factory.mktemp("cache")) as url:
        yield url


@pytest.fixture(scope="module")
def client(server):
    gradio_client = pytest.importorskip("gradio_client")
    return gradio_client.Client(server, verbose=False)


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    """A loaded app Session on the tiny-llama pair, with its own cache folder (ui/ is imported
    here, not at the top, so that unit tests never import gradio)."""
    import torch

    from ui.session import Session

    torch.set_num_threads(1)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LIBRASPEC_CACHE", str(tmp_path_factory.mktemp("cache")))
        session = Session(offered=["tiny-llama"])
        for _ in session.load():
            pass
        yield session
