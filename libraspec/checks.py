"""The library's argument checks, one home for them: each returns the checked value or raises
ValueError naming what is wrong. A run's settings are checked once, by `spec.RunSpec.checked`
(clamped, with notes); these guard the library's own constructors and functions against a
caller that passes no checked spec, and a checked spec always passes them."""

from __future__ import annotations

import math

import numpy as np


def check_int(value, name: str, low: int = 1) -> int:
    """`value` as an int, after checking: an integer (not a bool) >= `low`; `name` says which."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def check_alpha(alpha: float) -> float:
    """alpha as a float, after checking: a finite number > 0 (LibraSpec's trade-off)."""
    if (
        isinstance(alpha, bool)
        or not isinstance(alpha, (int, float, np.floating, np.integer))
        or not math.isfinite(alpha)
        or alpha <= 0
    ):
        raise ValueError(f"alpha must be a finite number > 0, got {alpha!r}")
    return float(alpha)


def check_confidences(q) -> list[float]:
    """Confidences as a Python list, after checking: 1-D, non-empty, finite, within [0, 1]."""
    q = np.asarray(q, dtype=np.float64)
    if q.ndim != 1 or q.size == 0:
        raise ValueError(f"confidences q must be a non-empty 1-D array, got shape {q.shape}")
    values = q.tolist()
    # a NaN can hide from min/max but never from the sum
    if not (min(values) >= 0.0 and max(values) <= 1.0 and not math.isnan(sum(values))):
        raise ValueError("confidences q must be finite and within [0, 1]")
    return values


def check_buffer(buffer) -> tuple[int, int]:
    """(n, drafted) of a draft buffer (`policy.DraftBufferLike`), after checking: n >= 1 and a
    non-empty whole number of blocks drafted."""
    n = int(buffer.n)
    if n < 1:
        raise ValueError(f"buffer n must be >= 1, got {n}")
    drafted = len(buffer.confidences)
    if drafted == 0:
        raise ValueError("draft buffer is empty: draft at least one block before choosing d")
    if drafted % n:
        raise ValueError(f"buffer holds {drafted} confidences, not a multiple of n = {n}")
    return n, drafted
