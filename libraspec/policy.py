"""Speculative-length policies: LibraSpec (Algorithm 1) and the comparison policies.

Paper symbols: n is the block size (draft tokens per drafting step), d the speculative
length submitted for verification, d_max its cap, q_i the drafter confidence of draft
token i, alpha the trade-off hyperparameter, B the draft budget (drafted tokens not yet
inside d), and eps_i = floor(alpha * S_i + i) the bound of position i with
S_i = sum_{j=i..d} prod_{k=i..j} q_k (Algorithm 1, line 6; Theorem 3.4, Eq. 6).

S_i obeys S_i = q_i * (1 + S_{i+1}), S_{d+1} = 0, so all eps_i cost O(d).

Floors use a tolerance: eps_i = floor(alpha * S_i + i + 1e-9). The exact value can be an
integer that float arithmetic lands just below (e.g. 3 * 0.1 * 10); the 1e-9 guard keeps
such cases, like all q = 1, exact. Values within 1e-9 below an integer round up.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Protocol, Sequence, runtime_checkable

import numpy as np

from libraspec.checks import check_alpha, check_buffer, check_confidences, check_int
from libraspec.records import PolicyStep, RoundRecord

FLOOR_TOLERANCE = 1e-9  # absorbs float rounding in floor(alpha * S_i + i)


def _sums(q: list[float], d: int) -> list[float]:
    """S_1..S_d over q_1..q_d by S_i = q_i (1 + S_{i+1}), S_{d+1} = 0: the expected accepted drafts
    of the segment i..d given the drafts before i accepted (the paper's conditional segment sum)."""
    out, s = [0.0] * d, 0.0
    for i in range(d, 0, -1):
        s = q[i - 1] * (1.0 + s)
        out[i - 1] = s
    return out


def _bounds(q: list[float], d: int, alpha: float) -> list[int]:
    """eps_1..eps_d over q_1..q_d (Algorithm 1 line 6): floor(alpha S_i + i)."""
    return [math.floor(alpha * s + i + FLOOR_TOLERANCE) for i, s in enumerate(_sums(q, d), start=1)]


def worked_bounds(q, alpha: float) -> list[str]:
    """Each bound eps_i over q_1..q_d written out, "eps_7 = floor(2.2 * 0.939 + 7) = 9": what a
    teacher reads beside the bars (the numbers `epsilon_bounds` computes)."""
    values = check_confidences(q)
    alpha = check_alpha(alpha)
    bounds = _bounds(values, len(values), alpha)
    return [
        f"eps_{i} = floor({alpha:g} * {s:.3f} + {i}) = {e}"
        for i, (s, e) in enumerate(zip(_sums(values, len(values)), bounds), start=1)
    ]


def epsilon_bounds(q, alpha: float) -> np.ndarray:
    """eps_i = floor(alpha * S_i + i) for i = 1..d, d = len(q); element k is eps_{k+1}.

    Algorithm 1 line 6, computed with S_i = q_i (1 + S_{i+1}) in O(d). Returns int64.
    """
    values = check_confidences(q)
    return np.asarray(_bounds(values, len(values), check_alpha(alpha)), dtype=np.int64)


@dataclass(frozen=True)
class Decision:
    """What a policy decided for one round; the engine reads nothing else from a policy."""

    d: int  # drafts submitted for verification
    steps: tuple[PolicyStep, ...] = ()  # Algorithm 1 iterations (LibraSpec only)
    eps_bounds: tuple[int, ...] = ()  # eps_1..eps_d over q_1..q_d at the chosen d (LibraSpec only)
    alpha: float | None = None  # LibraSpec's alpha: the bounds' (Algorithm 1) or a priced rule's V / c
    nodes: int | None = None  # a tree mode's node count, when its policy chooses one (else the node budget)

    def capped(self, d: int, confidences) -> "Decision":
        """This decision cut to d drafts when the round has room for fewer than it chose, with the
        bounds eps_i over the d drafts that are verified (what a record shows)."""
        if d >= self.d:
            return self
        recorded = d and self.alpha and self.eps_bounds  # a rule without Algorithm 1's bounds keeps none
        bounds = tuple(int(e) for e in epsilon_bounds(confidences[:d], self.alpha)) if recorded else ()
        return dataclasses.replace(self, d=d, eps_bounds=bounds)


@runtime_checkable
class DraftBufferLike(Protocol):
    """What a policy sees of the round's drafts (the engine's DraftBuffer)."""

    n: int  # drafts per drafting step (a block)
    confidences: np.ndarray  # (drafted,) q of every drafted token; drafted % n == 0

    def extend(self, num_blocks: int) -> None:
        """Draft `num_blocks` more blocks; confidences grows by num_blocks * n."""


class SourcedBufferLike(DraftBufferLike, Protocol):
    """A buffer a rule that prices its drafting reads (vLLM's adaptive verification): the source of
    each drafted step, and (step, source) of what a step proposed and did not use."""

    step_sources: Sequence[str]  # (drafted // n,)
    discarded: Sequence[tuple[int, str]]


@runtime_checkable
class LengthPolicy(Protocol):
    """Chooses d for a round and learns from the round's record."""

    name: str
    d_max: int  # largest length choose_length may return

    def choose_length(self, buffer: DraftBufferLike) -> Decision: ...

    def update(self, record: RoundRecord) -> None: ...

    def reset(self) -> None: ...


def ensure_drafted(buffer: DraftBufferLike, length: int) -> None:
    """Draft just enough blocks that the buffer holds >= `length` tokens."""
    n, drafted = int(buffer.n), len(buffer.confidences)
    if length > drafted:
        buffer.extend(-(-(length - drafted) // n))


class LibraSpecPolicy:
    """Algorithm 1: grow d by single beneficial adjustments d <- min_i eps_i.

    The loop starts at d = n with B = drafted - n (0 when the buffer holds exactly the
    first block, as in the paper; more if the engine drafted ahead). B stays equal to
    drafted - d throughout; after the rollback (line 8) the recorded B is drafted - d
    too, although the paper no longer uses it. eps* is capped at d_max inside the loop
    (docs/ARCHITECTURE.md, "Length policies"), so no block is drafted that d cannot reach. With d_max == n
    the loop never runs and d = n.

    `start` (the paper's "initial speculative length", 10 for its Fast-dLLM runs; None = n, the
    drafter's block, as Algorithm 1 writes it) moves line 4 to d <- start, first drafting the blocks
    that reach it; B = drafted - start, so a start below n leaves the rest of the block as budget.
    """

    name = "libraspec"

    def __init__(self, alpha: float, d_max: int, start: int | None = None):
        self.alpha = check_alpha(alpha)
        self.d_max = check_int(d_max, "d_max")
        self.start = None if start is None else check_int(start, "LibraSpec start")
        if self.start is not None and self.start > self.d_max:
            raise ValueError(f"LibraSpec start {start} exceeds d_max {d_max}")

    def choose_length(self, buffer: DraftBufferLike) -> Decision:
        n, drafted = check_buffer(buffer)  # line 3: one block is already drafted
        if self.start is None and n > self.d_max:
            raise ValueError(f"LibraSpec needs d_max >= n, got d_max={self.d_max}, n={n}")
        d = n if self.start is None else self.start
        ensure_drafted(buffer, d)  # a start past the first block: the blocks that reach it
        q = check_confidences(buffer.confidences)
        budget = len(q) - d  # line 4: d <- n (or start); B <- 0 (+ blocks drafted ahead)
        steps = []
        while d < self.d_max:  # line 5
            eps_star = min(_bounds(q, d, self.alpha))  # line 6: eps* <- min_i eps_i
            if eps_star <= d:  # line 7
                budget += d - eps_star  # B = drafted - d after the rollback (bookkeeping only)
                steps.append(PolicyStep(d, eps_star, eps_star, budget, 0, True))
                d = eps_star  # line 8: d <- eps*; break
                break
            d_new = min(eps_star, self.d_max)  # cap at d_max
            budget -= d_new - d  # line 10: B <- B - (eps* - d)
            blocks = 0
            if budget < 0:  # line 11
                blocks = -(-(-budget) // n)  # line 12: ceil(-B / n) blocks
                buffer.extend(blocks)
                budget += blocks * n  # line 12: B <- B + ceil(-B / n) n
                q = check_confidences(buffer.confidences)
            steps.append(PolicyStep(d, eps_star, d_new, budget, blocks, False))
            d = d_new  # line 10: d <- eps*
        return Decision(d, tuple(steps), tuple(_bounds(q, d, self.alpha)), self.alpha)  # line 15: submit d

    def update(self, record: RoundRecord) -> None:
        """Algorithm 1 keeps no state across rounds."""

    def reset(self) -> None:
        """Algorithm 1 keeps no state across rounds."""


class StaticPolicy:
    """Always submits the same d (drafting more blocks when d exceeds what is drafted)."""

    name = "static"

    def __init__(self, length: int):
        self.length = check_int(length, "static length")
        self.d_max = self.length

    def choose_length(self, buffer: DraftBufferLike) -> Decision:
        check_buffer(buffer)
        ensure_drafted(buffer, self.length)
        return Decision(self.length)

    def update(self, record: RoundRecord) -> None:
        """Static length: nothing to learn."""

    def reset(self) -> None:
        """Static length: nothing to forget."""


class G4Policy:
    """Heuristic schedule: d += 2 after a fully accepted round, d -= 1 otherwise, in [1, d_max]."""

    name = "g4"

    def __init__(self, initial: int, d_max: int):
        self.d_max = check_int(d_max, "d_max")
        self.initial = check_int(initial, "initial length")
        if self.initial > self.d_max:
            raise ValueError(f"initial length {initial} exceeds d_max {d_max}")
        self.length = self.initial

    def choose_length(self, buffer: DraftBufferLike) -> Decision:
        check_buffer(buffer)
        ensure_drafted(buffer, self.length)
        return Decision(self.length)

    def update(self, record: RoundRecord) -> None:
        if record.chosen_length == 0:  # an AR step: the drafter had nothing to offer
            return
        grow = record.accepted == record.chosen_length
        self.length = min(self.d_max, max(1, self.length + (2 if grow else -1)))

    def reset(self) -> None:
        self.length = self.initial


class FailFastPolicy:
    """Extend d in steps of `step` while every confidence q_1..q_d stays >= threshold."""

    name = "failfast"

    def __init__(self, threshold: float, step: int, d_max: int):
        if not (isinstance(threshold, (int, float, np.floating)) and 0.0 <= threshold <= 1.0):
            raise ValueError(f"threshold must be within [0, 1], got {threshold!r}")
        self.threshold = float(threshold)
        self.step = check_int(step, "step")
        self.d_max = check_int(d_max, "d_max")

    def choose_length(self, buffer: DraftBufferLike) -> Decision:
        check_buffer(buffer)
        d = min(self.step, self.d_max)
        ensure_drafted(buffer, d)
        while d < self.d_max and min(check_confidences(buffer.confidences)[:d]) >= self.threshold:
            d = min(d + self.step, self.d_max)
            ensure_drafted(buffer, d)
        return Decision(d)

    def update(self, record: RoundRecord) -> None:
        """Decides from the current confidences only."""

    def reset(self) -> None:
        """Keeps no state across rounds."""


# -- what a chain of confidences is expected to yield (theory.py builds on these) --


def check_acceptance(p, d_max: int) -> np.ndarray:
    """p as a float array (d,), checked: 1-D, within [0, 1], at least d_max long."""
    p = np.asarray(p, dtype=np.float64)
    if p.ndim != 1 or p.size == 0:
        raise ValueError(f"acceptance probabilities p must be a non-empty 1-D array, got {p.shape}")
    if not np.all(np.isfinite(p)) or p.min() < 0 or p.max() > 1:
        raise ValueError("acceptance probabilities p must be finite and within [0, 1]")
    if d_max > p.size:
        raise ValueError(f"need p for every position up to {d_max}, got {p.size}")
    return p


def expected_accepted(p, d: int | None = None) -> float:
    """E[accepted drafts at length d] = sum_{j=1..d} prod_{k<=j} p_k (Eq. 14, i = 1); d = None: all of p."""
    d = len(p) if d is None else d
    if d < 0:
        raise ValueError(f"d must be >= 0, got {d}")
    p = check_acceptance(p, d)
    return float(np.cumprod(p[:d]).sum())
