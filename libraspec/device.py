"""Where the models run: device and dtype choice, and freeing model memory.

CUDA when a GPU is present (bfloat16 weights, PyTorch SDPA attention), else the CPU in
float32. `LIBRASPEC_DEVICE` ("cpu", "cuda", "cuda:1") and `LIBRASPEC_DTYPE` ("float32",
"bfloat16", "float16") override the choice. On a ZeroGPU Space (env `SPACES_ZERO_GPU`)
CUDA counts as present although `torch` sees no GPU yet: one is granted on demand, and
the models are placed on CUDA at start-up. How the app is hosted (GPU reservations,
package installs) lives in the app's `ui/hosting.py`, not here. Paper symbols do not
appear here.
"""

from __future__ import annotations

import os

import torch

DEVICE_ENV = "LIBRASPEC_DEVICE"
DTYPE_ENV = "LIBRASPEC_DTYPE"
ATTENTION = "sdpa"  # PyTorch scaled-dot-product attention: no extra kernels to build on a Space
DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
    "float64": torch.float64,
}


def _truthy(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on", "t")


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
        raise ValueError(
            f"device {device} was requested but no CUDA GPU is available (torch "
            f"{torch.__version__}, built for CUDA {torch.version.cuda or 'none'})"
        )
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


def free_memory() -> None:
    """Return freed model memory: collect garbage, then release CUDA's cached blocks."""
    import gc

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
