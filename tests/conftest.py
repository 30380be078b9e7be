"""Shared fixtures (one local app per test module, tiny-llama pair, and its API client) and
the test layers.

Every test gets exactly one layer marker (declared in pyproject.toml), chosen here by file:
- unit: the library on tiny random models, no server, browser or embedded model
  (`pytest -m unit` is the fast run);
- app: the Gradio app and its ui/ helpers on the tiny pair;
- e2e: a real browser, the embedded SmolLM2 pair, or scripts/ run as subprocesses.
A file not named in FILE_LAYERS is unit, except its tests marked `slow` (e2e); a test that
carries a layer marker itself keeps it.
"""

from __future__ import annotations

import pytest
from apptools import tiny_app

LAYERS = ("unit", "app", "e2e")
FILE_LAYERS = {
    "test_app.py": "app",
    "test_bad_input.py": "app",
    "test_run_store.py": "app",
    "test_ui.py": "app",
    "test_clients.py": "app",
    "test_session.py": "app",
    "test_hosting.py": "app",
    "test_browser.py": "e2e",
    "test_browser_trust.py": "e2e",
    "test_embedded.py": "e2e",
    "test_load.py": "e2e",
    "test_memory.py": "e2e",
    "test_setup_scripts.py": "e2e",
    "test_gpu_check.py": "e2e",
}


def layer_of(item: pytest.Item) -> str:
    own = [name for name in LAYERS if item.get_closest_marker(name)]
    if len(own) > 1:
        raise pytest.UsageError(f"{item.nodeid} has the layer markers {own}; a test belongs to one layer")
    if own:
        return own[0]
    return FILE_LAYERS.get(item.path.name) or ("e2e" if item.get_closest_marker("slow") else "unit")


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
