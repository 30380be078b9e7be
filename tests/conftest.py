"""Shared fixtures: one local app per test module (tiny-llama pair) and its API client."""
from __future__ import annotations

import pytest

from apptools import tiny_app


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The app's URL on a free 127.0.0.1 port (tiny-llama pair, n = 7, context 512)."""
    with tiny_app(tmp_path_factory.mktemp("cache")) as url:
        yield url


@pytest.fixture(scope="module")
def client(server):
    gradio_client = pytest.importorskip("gradio_client")
    return gradio_client.Client(server, verbose=False)
