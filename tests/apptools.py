"""A local app for API and browser tests: tiny-llama pair, a private cache, a free port."""
from __future__ import annotations

import contextlib
import os
import socket

import torch

ENV_KEYS = ("LIBRASPEC_MODEL", "LIBRASPEC_CACHE", "LIBRASPEC_PAIRS")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def tiny_app(cache_dir):
    """Serve the app on 127.0.0.1 with the tiny-llama pair (n = 7, context 512); yields its URL."""
    torch.set_num_threads(1)
    saved = {key: os.environ.get(key) for key in ENV_KEYS}
    os.environ.update(LIBRASPEC_MODEL="tiny-llama", LIBRASPEC_CACHE=str(cache_dir))
    os.environ.pop("LIBRASPEC_PAIRS", None)
    try:
        import app
        demo = app.build_demo()
        _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=free_port(),
                                quiet=True)
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
