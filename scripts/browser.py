"""What the screenshot and start-up scripts share: serve a Gradio demo on a free local port and
open it in headless Debian chromium (never `playwright install`) at 1440x900."""

from __future__ import annotations

import contextlib
import socket


def serve(demo) -> str:
    """Launch `demo` on a free port of 127.0.0.1 without blocking; returns its URL."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True)
    return url


@contextlib.contextmanager
def page_at(url: str):
    """A 1440x900 page of headless chromium showing `url`; the browser closes afterwards."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path="/usr/bin/chromium", headless=True, args=["--no-sandbox", "--disable-background-networking"]
        )
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            page.goto(url)
            yield page
        finally:
            browser.close()
