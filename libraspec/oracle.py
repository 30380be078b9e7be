"""The oracle speculative length d* of a round (paper section 4).

Once the target has verified d_max drafts, the accepted prefix a(d) is known for every
d = 1..d_max (greedy: a(d) = min(d, m) with m the index of the first mismatch). Each d
commits tau = a(d) + 1 tokens (accepted drafts plus the bonus/correction token) in
T_round(d) seconds, so the oracle picks d* = argmax_d (a(d) + 1) / T_round(d), ties to
the shorter d.
"""

from __future__ import annotations

from typing import Callable, Sequence, Union

import numpy as np

TIE_RTOL = 1e-12  # rates within this relative distance of the best count as a tie

RoundTime = Union[Callable[[int], float], Sequence[float], np.ndarray]


def _round_times(round_time: RoundTime, count: int) -> np.ndarray:
    if callable(round_time):
        times = np.array([float(round_time(d)) for d in range(1, count + 1)])
    else:
        times = np.asarray(round_time, dtype=np.float64)
        if times.ndim != 1 or times.size < count:
            raise ValueError(f"round_time must give a time for each d = 1..{count}, got shape {times.shape}")
        times = times[:count]
    if not np.all(np.isfinite(times)) or np.any(times <= 0):
        raise ValueError("round times must be finite and > 0")
    return times  # (D,)


def oracle_rates(accepted_prefix, round_time: RoundTime) -> np.ndarray:
    """Committed tokens per second, (a(d) + 1) / T_round(d), for d = 1..D."""
    a = np.asarray(accepted_prefix)
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"accepted_prefix must be a non-empty 1-D array, got shape {a.shape}")
    if not np.issubdtype(a.dtype, np.integer):
        if not np.all(np.isfinite(a)) or np.any(a != np.round(a)):
            raise ValueError("accepted_prefix must hold integers")
        a = a.astype(np.int64)
    lengths = np.arange(1, a.size + 1)
    if np.any(a < 0) or np.any(a > lengths):
        raise ValueError("accepted_prefix[d-1] = a(d) must lie in [0, d]")
    if np.any(np.diff(a) < 0):
        raise ValueError("accepted_prefix must be non-decreasing in d")
    return (a + 1) / _round_times(round_time, a.size)  # (D,)


def oracle_length(accepted_prefix, round_time: RoundTime, zero_time: float | None = None) -> int:
    """d* = argmax_d (a(d) + 1) / T_round(d) over d = 1..D, ties to the shorter d.

    `round_time` is a callable d -> seconds (e.g. `LatencyProfile.round_time`) or a 1-D
    array of times for d = 1..D. Rates within a relative 1e-12 of the best are ties.
    With `zero_time` (the seconds of a round that verifies no draft) d = 0 competes too: it
    commits one token, so it wins exactly when the first draft would be rejected and skipping
    its verification saves time.
    """
    rates = oracle_rates(accepted_prefix, round_time)
    if zero_time is not None:
        if not (np.isfinite(zero_time) and zero_time > 0):
            raise ValueError(f"zero_time must be a finite time > 0, got {zero_time!r}")
        rates = np.concatenate([[1.0 / zero_time], rates])  # (D + 1,): d = 0..D
    best = rates.max()
    return int(np.flatnonzero(rates >= best * (1.0 - TIE_RTOL))[0]) + (0 if zero_time is not None else 1)
