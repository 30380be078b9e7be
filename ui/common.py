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


def as_error(error: Exception | str) -> gr.Error:
    """The message a refused call shows the visitor. An ordinary refusal (a ValueError, or a message of
    our own) is not logged with a traceback: the server log keeps tracebacks for what went wrong (an
    OSError, a bug), not for an empty prompt or a value that is no number."""
    return gr.Error(str(error), print_exception=not isinstance(error, (str, ValueError)))
