"""Algorithm 1 one iteration at a time, for the teaching view (DESIGN.md section 8).

`algorithm_states(q, n, alpha, d_max)` replays LibraSpec's length loop over fixed
confidences and returns every intermediate state: d, the budget B, the blocks drafted,
the bounds eps_i = floor(alpha * S_i + i) the iteration compared (Algorithm 1 line 6,
Theorem 3.4, Eq. 6), eps* = min_i eps_i, and a plain sentence saying what the step did
and why. Each iteration's `PolicyStep` equals the one `policy.LibraSpecPolicy` records
for the same confidences (tests/test_stepper.py proves it on random inputs), so the
pictures teach exactly the rule the engine runs.

Paper symbols: n block size, d speculative length, d_max its cap, q_i drafter confidence
of draft i, alpha trade-off, B draft budget (drafted tokens not yet inside d).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from libraspec.policy import epsilon_bounds
from libraspec.records import PolicyStep


@dataclass(frozen=True)
class StepState:
    """Algorithm 1 after `index` iterations (0: lines 3-4, before the loop)."""

    index: int
    d: int  # d after this state
    budget: int  # B after this state
    blocks: int  # blocks drafted so far
    drafted: int  # drafts made so far: blocks * n
    eps: tuple[int, ...]  # eps_i over q_1..q_{d_before}, what this iteration compared (index 0: the first block)
    eps_star: int  # min_i eps_i of `eps`
    argmin: int  # the (first) position i with eps_i = eps*, 1-based
    step: PolicyStep | None  # the iteration as LibraSpecPolicy records it; None for index 0
    done: bool  # True on the last state: LibraSpec submits d
    reason: str  # "start", "extend", "stop" (line 8), "cap" (d reached d_max, line 5)
    message: str  # what the step did and why, in words


def _check_int(value, name: str, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def _bounds(q: np.ndarray, d: int, alpha: float) -> tuple[tuple[int, ...], int, int]:
    """(eps_1..eps_d over q_1..q_d, eps*, first argmin i) (Algorithm 1 line 6)."""
    eps = tuple(int(e) for e in epsilon_bounds(q[:d], alpha))
    star = min(eps)
    return eps, star, eps.index(star) + 1


def _extend_message(k: int, d: int, star: int, at: int, d_new: int, d_max: int, before: int,
                    budget: int, blocks: int, n: int) -> str:
    capped = f" (capped at d_max = {d_max})" if d_new < star else ""
    text = (f"Iteration {k}: eps* = min_i eps_i = {star} (at i = {at}) > d = {d}. Every position's bound "
            f"lies above d, so growing d is a beneficial adjustment (Theorem 3.4): the expected tokens the "
            f"drafts {d + 1}..{d_new} add, per extra verified position, beat the average of the current "
            f"length (Theorem 3.2). d: {d} -> {d_new}{capped} (line 10).")
    spent = before - (d_new - d)
    if blocks:
        text += (f" B = {before} - {d_new - d} = {spent} < 0: the drafts made so far do not reach d, so "
                 f"{blocks} more block{'s' if blocks > 1 else ''} of n = {n} "
                 f"{'are' if blocks > 1 else 'is'} drafted (line 12), B = {budget}.")
    else:
        text += (f" B = {before} - {d_new - d} = {budget} >= 0: the drafts already made cover it, "
                 "nothing new is drafted.")
    return text


def _stop_message(k: int, d: int, star: int, at: int) -> str:
    if star == d:
        outcome = f"d stays at {d}"
    else:
        outcome = f"d rolls back to eps* = {star} (the drafts after it cost more than they are expected to bring)"
    return (f"Iteration {k}: eps* = {star} (at i = {at}) <= d = {d}: the bound of position {at} falls at or "
            f"below d, so no longer length is a beneficial adjustment. {outcome} and the loop stops (line 8); "
            f"LibraSpec submits d = {star} drafts.")


def algorithm_states(q, n: int, alpha: float, d_max: int, initial_blocks: int = 1) -> list[StepState]:
    """Every state of Algorithm 1 over confidences `q` (q_1, q_2, ... as revealed by drafting).

    The loop mirrors `LibraSpecPolicy.choose_length` on a buffer that starts with
    `initial_blocks` drafted blocks: d = n, B = (initial_blocks - 1) * n; while d < d_max,
    eps* = min_i eps_i over q_1..q_d; eps* <= d: d = eps*, stop; else d' = min(eps*, d_max),
    B -= d' - d, and B < 0 drafts ceil(-B / n) blocks. Only q_1..q_d of the current d enter
    a bound, so `q` must cover d_max positions; blocks past the end of `q` are counted, not
    read. Returns at least one state; the last has done=True.
    """
    n = _check_int(n, "block size n")
    d_max = _check_int(d_max, "d_max")
    initial_blocks = _check_int(initial_blocks, "initial_blocks")
    if n > d_max:
        raise ValueError(f"LibraSpec needs d_max >= n, got d_max={d_max}, n={n}")
    q = np.asarray(q, dtype=np.float64).reshape(-1)
    if q.size < d_max:
        raise ValueError(f"need a confidence q_i for every position up to d_max = {d_max}, got {q.size}")
    if not np.all(np.isfinite(q)) or q.min() < 0 or q.max() > 1:
        raise ValueError("confidences q must be finite and within [0, 1]")
    blocks = initial_blocks
    d, budget = n, blocks * n - n  # line 4: d <- n; B <- 0 (+ blocks drafted ahead)
    eps, star, at = _bounds(q, d, alpha)  # also checks alpha
    if d >= d_max:
        message = (f"Start: one block of n = {n} drafts, d = n = d_max = {d_max}. The loop (line 5) never runs; "
                   f"LibraSpec submits d = {d}.")
        return [StepState(0, d, budget, blocks, blocks * n, eps, star, at, None, True, "cap", message)]
    states = [StepState(0, d, budget, blocks, blocks * n, eps, star, at, None, False, "start",
                        f"Start (lines 3-4): one block of n = {n} drafts is made, d = n = {n}, B = {budget}. "
                        f"Each iteration compares eps* = min_i eps_i with d (alpha = {alpha:g}, d_max = {d_max}).")]
    while d < d_max:  # line 5
        k = len(states)
        eps, star, at = _bounds(q, d, alpha)  # line 6
        if star <= d:  # line 7
            budget += d - star
            step = PolicyStep(d, star, star, budget, 0, True)
            states.append(StepState(k, star, budget, blocks, blocks * n, eps, star, at, step, True, "stop",
                                    _stop_message(k, d, star, at)))
            return states  # line 8
        d_new = min(star, d_max)
        before = budget
        budget -= d_new - d  # line 10
        new_blocks = 0
        if budget < 0:  # line 11
            new_blocks = -(-(-budget) // n)  # line 12: ceil(-B / n)
            budget += new_blocks * n
            blocks += new_blocks
        step = PolicyStep(d, star, d_new, budget, new_blocks, False)
        message = _extend_message(k, d, star, at, d_new, d_max, before, budget, new_blocks, n)
        done = d_new >= d_max
        if done:
            message += f" d = d_max = {d_max}: the loop ends (line 5); LibraSpec submits d = {d_new} drafts."
        states.append(StepState(k, d_new, budget, blocks, blocks * n, eps, star, at, step, done,
                                "cap" if done else "extend", message))
        d = d_new
    return states


def final_length(states: list[StepState]) -> int:
    """The d LibraSpec submits: the last state's d."""
    if not states:
        raise ValueError("no states: run algorithm_states first")
    return states[-1].d


def synthetic_confidences(length: int, start: float, decay: float, noise: float, seed: int) -> np.ndarray:
    """A made-up confidence profile for teaching: q_i = clip(start * (1 - decay)^(i-1) + noise * z_i, 0, 1).

    `start` is q_1 before noise, `decay` the fraction lost per draft position (0: flat),
    `noise` the standard deviation of independent Gaussian z_i (numpy generator `seed`).
    Returns (length,) float64. Synthetic, for the step-through only; never shown as measured.
    """
    length = _check_int(length, "length")
    for name, value, low, high in (("start", start, 0.0, 1.0), ("decay", decay, 0.0, 1.0),
                                   ("noise", noise, 0.0, 1.0)):
        if not (isinstance(value, (int, float, np.floating)) and math.isfinite(value) and low <= value <= high):
            raise ValueError(f"{name} must be a number within [{low:g}, {high:g}], got {value!r}")
    rng = np.random.default_rng(_check_int(seed, "seed", 0))
    base = float(start) * (1.0 - float(decay)) ** np.arange(length)  # (length,)
    return np.clip(base + float(noise) * rng.standard_normal(length), 0.0, 1.0)


def parse_confidences(text: str) -> np.ndarray:
    """Confidences from pasted text: numbers separated by commas, spaces, semicolons or new lines."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("paste at least one confidence, e.g. 0.9, 0.8, 0.7")
    items = [t for t in re.split(r"[\s,;\[\]]+", text.strip()) if t]
    try:
        q = np.array([float(t) for t in items], dtype=np.float64)
    except ValueError:
        bad = next(t for t in items if not _is_number(t))
        raise ValueError(f"not a number in the pasted confidences: {bad!r}") from None
    if not np.all(np.isfinite(q)) or q.min() < 0 or q.max() > 1:
        raise ValueError("pasted confidences must be finite and within [0, 1]")
    return q


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
