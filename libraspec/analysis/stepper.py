"""Algorithm 1 one iteration at a time, for the teaching view.

`algorithm_states(q, n, alpha, d_max)` runs `policy.LibraSpecPolicy` (the one implementation
of Algorithm 1) over fixed confidences in an `ArrayBuffer` and formats its trace: every
intermediate state with d, the budget B, the blocks drafted, the bounds
eps_i = floor(alpha * S_i + i) the iteration compared (Algorithm 1 line 6, Theorem 3.4,
Eq. 6), eps* = min_i eps_i, and a plain sentence saying what the step did and why. So the
pictures teach exactly the rule the engine runs.

Paper symbols: n block size, d speculative length, d_max its cap, q_i drafter confidence
of draft i, alpha trade-off, B draft budget (drafted tokens not yet inside d).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from libraspec.checks import check_int
from libraspec.cost import DIFFUSION
from libraspec.policy import LibraSpecPolicy, epsilon_bounds
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


def _bounds(q: np.ndarray, d: int, alpha: float) -> tuple[tuple[int, ...], int, int]:
    """(eps_1..eps_d over q_1..q_d, eps*, first argmin i) (Algorithm 1 line 6)."""
    eps = tuple(int(e) for e in epsilon_bounds(q[:d], alpha))
    star = min(eps)
    return eps, star, eps.index(star) + 1


def _extend_message(
    k: int, d: int, star: int, at: int, d_new: int, d_max: int, before: int, budget: int, blocks: int, n: int
) -> str:
    capped = f" (capped at d_max = {d_max})" if d_new < star else ""
    text = (
        f"Iteration {k}: eps* = min_i eps_i = {star} (at i = {at}) > d = {d}. Every position's bound "
        f"lies above d, so growing d is a beneficial adjustment (Theorem 3.4): the expected tokens the "
        f"drafts {d + 1}..{d_new} add, per extra verified position, beat the average of the current "
        f"length (Theorem 3.2). d: {d} -> {d_new}{capped} (line 10)."
    )
    spent = before - (d_new - d)
    if blocks:
        text += (
            f" B = {before} - {d_new - d} = {spent} < 0: the drafts made so far do not reach d, so "
            f"{blocks} more block{'s' if blocks > 1 else ''} of n = {n} "
            f"{'are' if blocks > 1 else 'is'} drafted (line 12), B = {budget}."
        )
    else:
        text += (
            f" B = {before} - {d_new - d} = {budget} >= 0: the drafts already made cover it, nothing new is drafted."
        )
    return text


def _stop_message(k: int, d: int, star: int, at: int) -> str:
    if star == d:
        outcome = f"d stays at {d}"
    else:
        outcome = f"d rolls back to eps* = {star} (the drafts after it cost more than they are expected to bring)"
    return (
        f"Iteration {k}: eps* = {star} (at i = {at}) <= d = {d}: the bound of position {at} falls at or "
        f"below d, so no longer length is a beneficial adjustment. {outcome} and the loop stops (line 8); "
        f"LibraSpec submits d = {star} drafts."
    )


def algorithm_states(q, n: int, alpha: float, d_max: int, initial_blocks: int = 1) -> list[StepState]:
    """Every state of Algorithm 1 over confidences `q` (q_1, q_2, ... as revealed by drafting).

    The buffer starts with `initial_blocks` drafted blocks. Only q_1..q_d of the current d
    enter a bound, so `q` must cover d_max positions; blocks past the end of `q` are counted,
    not read. Returns at least one state; the last has done=True.
    """
    n = check_int(n, "block size n")
    d_max = check_int(d_max, "d_max")
    initial_blocks = check_int(initial_blocks, "initial_blocks")
    if n > d_max:
        raise ValueError(f"LibraSpec needs d_max >= n, got d_max={d_max}, n={n}")
    q = np.asarray(q, dtype=np.float64).reshape(-1)
    if q.size < d_max:
        raise ValueError(f"need a confidence q_i for every position up to d_max = {d_max}, got {q.size}")
    if not np.all(np.isfinite(q)) or q.min() < 0 or q.max() > 1:
        raise ValueError("confidences q must be finite and within [0, 1]")
    blocks_needed = initial_blocks + -(-d_max // n)  # never read past d_max: zeros stand in
    padded = np.zeros(blocks_needed * n)
    padded[: min(q.size, padded.size)] = q[: padded.size]
    steps = LibraSpecPolicy(alpha, d_max).choose_length(ArrayBuffer.revealing(padded, n, initial_blocks)).steps
    blocks, budget = initial_blocks, (initial_blocks - 1) * n  # line 4: d <- n; B <- 0 (+ blocks drafted ahead)

    def state(k, d, budget, step, done, kind, message) -> StepState:  # with the blocks and bounds as they stand
        return StepState(k, d, budget, blocks, blocks * n, eps, star, at, step, done, kind, message)

    eps, star, at = _bounds(q, n, alpha)
    if not steps:
        message = (
            f"Start: one block of n = {n} drafts, d = n = d_max = {d_max}. The loop (line 5) never runs; "
            f"LibraSpec submits d = {n}."
        )
        return [state(0, n, budget, None, True, "cap", message)]
    states = [
        state(
            0,
            n,
            budget,
            None,
            False,
            "start",
            f"Start (lines 3-4): one block of n = {n} drafts is made, d = n = {n}, B = {budget}. "
            f"Each iteration compares eps* = min_i eps_i with d (alpha = {alpha:g}, d_max = {d_max}).",
        )
    ]
    for k, step in enumerate(steps, start=1):
        d = step.d_before
        eps, star, at = _bounds(q, d, alpha)  # what line 6 compared
        blocks += step.blocks_requested
        if step.rollback:
            states.append(
                state(
                    k,
                    step.d_after,
                    step.budget,
                    step,
                    True,
                    "stop",
                    _stop_message(k, d, star, at),
                )
            )
            break
        message = _extend_message(k, d, star, at, step.d_after, d_max, budget, step.budget, step.blocks_requested, n)
        budget = step.budget
        done = k == len(steps)
        if done:
            message += f" d = d_max = {d_max}: the loop ends (line 5); LibraSpec submits d = {step.d_after} drafts."
        states.append(
            state(
                k,
                step.d_after,
                budget,
                step,
                done,
                "cap" if done else "extend",
                message,
            )
        )
    return states


def synthetic_confidences(length: int, start: float, decay: float, noise: float, seed: int) -> np.ndarray:
    """A made-up confidence profile for teaching: q_i = clip(start * (1 - decay)^(i-1) + noise * z_i, 0, 1).

    `start` is q_1 before noise, `decay` the fraction lost per draft position (0: flat),
    `noise` the standard deviation of independent Gaussian z_i (numpy generator `seed`).
    Returns (length,) float64. Synthetic, for the step-through only; never shown as measured.
    """
    length = check_int(length, "length")
    for name, value, low, high in (("start", start, 0.0, 1.0), ("decay", decay, 0.0, 1.0), ("noise", noise, 0.0, 1.0)):
        if not (isinstance(value, (int, float, np.floating)) and math.isfinite(value) and low <= value <= high):
            raise ValueError(f"{name} must be a number within [{low:g}, {high:g}], got {value!r}")
    rng = np.random.default_rng(check_int(seed, "seed", 0))
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


class ArrayBuffer:
    """A draft buffer over fixed confidences, for the teaching view, benchmarks and tests.

    `q` holds the confidences drafted so far (a multiple of n; may be empty), `more` the
    confidences later blocks will reveal, one block of n per drafted block. Extending
    past the end of `more` raises ValueError. `extend_calls` and `blocks_extended` count
    the drafting the policy asked for.
    """

    def __init__(self, q, n: int, more=None):
        self.n = check_int(n, "n")
        shown = np.asarray(q, dtype=np.float64).reshape(-1)
        hidden = np.asarray([] if more is None else more, dtype=np.float64).reshape(-1)
        if shown.size % self.n or hidden.size % self.n:
            raise ValueError(f"q and more must hold whole blocks of n = {self.n}")
        self._all = np.concatenate([shown, hidden])  # (drafted + future,)
        self._drafted = shown.size
        self.extend_calls = 0
        self.blocks_extended = 0

    @classmethod
    def revealing(cls, q_all, n: int, initial_blocks: int = 1) -> "ArrayBuffer":
        """Buffer over `q_all` with its first `initial_blocks` blocks already drafted."""
        q_all = np.asarray(q_all, dtype=np.float64).reshape(-1)
        cut = initial_blocks * n
        return cls(q_all[:cut], n, q_all[cut:])

    @property
    def confidences(self) -> np.ndarray:
        view = self._all[: self._drafted]  # (drafted,)
        view.flags.writeable = False
        return view

    @property
    def step_sources(self) -> tuple[str, ...]:
        """Block diffusion for every drafted block (a rule that prices drafting reads it)."""
        return (DIFFUSION,) * (self._drafted // self.n)

    discarded: tuple = ()  # a single-pass drafter proposes nothing it drops

    def extend(self, num_blocks: int) -> None:
        num_blocks = check_int(num_blocks, "num_blocks")
        end = self._drafted + num_blocks * self.n
        if end > self._all.size:
            raise ValueError(
                f"cannot draft {num_blocks} more blocks: only {(self._all.size - self._drafted) // self.n} left"
            )
        self._drafted = end
        self.extend_calls += 1
        self.blocks_extended += num_blocks
