"""What the tabs share: the model queue and the key of the client a call serves."""

from __future__ import annotations

import uuid

import gradio as gr

QUEUE = dict(concurrency_id="model", concurrency_limit=1)  # every model call, one at a time


def client_key(request: gr.Request | None) -> str:
    """The gradio session of the page or API client a call serves: the owner of its runs and sweeps.

    Handlers take `request: gr.Request` as their first parameter: gradio inserts it at its
    position among the inputs, so after an optional input it would take that input's place.
    A call without a session (an HTTP call that sends no session_hash) gets a key of its own,
    shared with nobody.
    """
    return getattr(request, "session_hash", None) or uuid.uuid4().hex
