"""Group decisions: one decision for the requests of a lock-step group, and what a lock-step round costs.

A length policy (policy.py) chooses one request's d from that request's own buffer. A **group
policy** chooses the lengths d_b of every request of a lock-step group at once, as serving engines
that batch requests do (vLLM's global draft budget admits the best draft slots over the whole
batch: a confident request's fifth draft can outrank a doubtful request's first). The lock-step
replay (`analysis.regimes.lockstep`) runs it this way, each round:

1. it hands the group each unfinished request's **chain** for the round about to run: the buffer
   that request's drafter opens at its committed position, with the first block drafted (Algorithm
   1 line 3; in replay a `trace.TraceBuffer`, which reads what the drafter proposes from that
   position); None for a request that finished. A chain is a `ChainLike`: the group reads its q_i
   (`confidences`) and may draft more blocks (`extend`, `policy.ensure_drafted`) before deciding.
   A chain whose first step found nothing (`empty`) offers no drafts: its request takes an AR step
   and its d_b must be 0;
2. `choose_lengths(chains)` returns d_b for every request (any value for a finished one);
3. each request's decoder runs its own `GroupMember`, a per-request `LengthPolicy` that returns the
   group's d_b after drafting every block the group read of that chain (those proposals were made,
   so the round pays for them) and those d_b needs; so every round runs the engine's own round
   code (its record, its prices, its acceptance);
4. `update(records)` gets each request's record of the round (None where it had none).

A group decides from the chains' q_i and earlier rounds' records only, never from a draft's
sampled value, as a length policy does (docs/ARCHITECTURE.md, "Lossless verification").

**What a lock-step round costs** (`forward_s`): one target forward over the B' unfinished requests,
from forwards measured on this machine at B = 1, 2, 4, 8 requests of k rows each
(`profiling.cached_concurrency`), two ways (`BATCHINGS`):

- padded: every request pays the longest request's rows, a forward of B' sequences of
  k = max_b (d_b + 1) rows (engines that pad the batch to one length);
- ragged: the forward costs by the group's total verified tokens N = sum_b (d_b + 1), as engines
  that flatten the batch do (vLLM, SGLang): the price of N tokens over B' requests is the measured
  forward of B' sequences of N / B' rows each.

Both read `at_batch`: the measured batch sizes, linear in B between them (the nearest size beyond
them), and linear in k between whole rows (a ragged N / B' lies between two). Both are
non-decreasing in every request's d, since a profile's forwards never fall with k (`knot_fit`); the
ragged price never exceeds the padded one (N / B' <= max k).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

from .checks import check_int
from .cost import DIFFUSION, LatencyProfile, drafting_s, upkeep_s
from .policy import Decision, LengthPolicy, ensure_drafted
from .priced import DEFAULT_PRIOR_TAU
from .records import RoundRecord
from .serving.vllm import (
    CalibratedView,
    OnlineCalibration,
    checked_ranges,
    global_budget,
    ranked_slots,
    schedule_length,
    survival,
)

PADDED, RAGGED = "padded", "ragged"
BATCHINGS = (PADDED, RAGGED)


def check_batching(batching: str) -> str:
    if batching not in BATCHINGS:
        raise ValueError(f"batching is one of {', '.join(BATCHINGS)}, got {batching!r}")
    return batching


# -- the price of a lock-step forward ------------------------------------------------------------


def at_batch(profiles: Mapping[int, LatencyProfile], B: int, k: int) -> float:
    """A forward of B sequences of k rows: the measured batch sizes, linear between them."""
    sizes = sorted(profiles)
    if B in profiles:
        return profiles[B].verify_time(k)
    lo = max([s for s in sizes if s < B], default=sizes[0])
    hi = min([s for s in sizes if s > B], default=sizes[-1])
    a, b = profiles[lo].verify_time(k), profiles[hi].verify_time(k)
    return a if hi == lo else a + (b - a) * (B - lo) / (hi - lo)


def at_rows(profiles: Mapping[int, LatencyProfile], B: int, rows: float) -> float:
    """A forward of B sequences of `rows` rows each, rows >= 1 and possibly fractional (a ragged
    batch's N / B): `at_batch`, linear in k between the whole rows around it."""
    if rows < 1:
        raise ValueError(f"a forward verifies at least 1 row per request, got {rows}")
    low = math.floor(rows)
    part = rows - low
    if part == 0:
        return at_batch(profiles, B, low)
    a, b = at_batch(profiles, B, low), at_batch(profiles, B, low + 1)
    return a + (b - a) * part


def rows_of(record: RoundRecord) -> int:
    """The rows a request's round verified: its tree's nodes or its d drafts, plus its last token."""
    return (record.tree_size if record.tree_size else record.chosen_length) + 1


def forward_s(profiles: Mapping[int, LatencyProfile], rows: Sequence[int], batching: str = PADDED) -> float:
    """One lock-step forward over the requests that verify `rows` rows each (d_b + 1; a tree's
    nodes + 1), priced `batching` (module docstring): padded, B' = len(rows) sequences of max(rows)
    rows; ragged, B' sequences of sum(rows) / B' rows."""
    if not rows:
        raise ValueError("a lock-step forward needs at least one request")
    if check_batching(batching) == PADDED:
        return at_batch(profiles, len(rows), max(rows))
    return at_rows(profiles, len(rows), sum(rows) / len(rows))


@dataclass(frozen=True)
class Batch:
    """A lock-step group as its group policy sees it: the concurrency profiles (batch size ->
    profile, `profiling.cached_concurrency`), the group's size B, how its forwards are priced
    (`BATCHINGS`) and whether its drafter reads target features (then each round pays the upkeep)."""

    profiles: Mapping[int, LatencyProfile] = field(compare=False)
    size: int
    batching: str = PADDED
    needs_features: bool = True

    def __post_init__(self):
        check_int(self.size, "a group's size")
        check_batching(self.batching)
        if not self.profiles:
            raise ValueError("a lock-step group needs at least one concurrency profile")

    @property
    def base(self) -> LatencyProfile:
        """The smallest batch size's profile: drafting and upkeep are timed at batch 1."""
        return self.profiles[min(self.profiles)]

    def forward_s(self, rows: Sequence[int]) -> float:
        """One lock-step forward over requests verifying `rows` rows each (`forward_s`)."""
        return forward_s(self.profiles, rows, self.batching)

    def tokens_s(self, tokens: int, requests: int) -> float:
        """A forward of `tokens` tokens over `requests` requests spread as evenly as they go (whole
        rows, at least one each): what a cost table indexed by the batch's token count (vLLM's,
        profiled on batches of even requests) reads. Ragged it is exactly the group's price; padded
        the price of the even spread, which a round of uneven rows exceeds."""
        check_int(requests, "requests")
        if tokens < requests:
            raise ValueError(f"{requests} requests verify at least {requests} tokens, got {tokens}")
        share, extra = divmod(int(tokens), requests)
        return self.forward_s([share + (i < extra) for i in range(requests)])

    def drafting_s(self, steps: Sequence[str]) -> float:
        """A request's drafting of these steps (their sources, `DraftBuffer.steps_run`) at batch 1,
        plus the drafter's upkeep after the round."""
        return drafting_s(self.base, list(steps)) + upkeep_s(self.base, self.needs_features, tuple(steps))


# -- the interface ---------------------------------------------------------------------------------


@runtime_checkable
class ChainLike(Protocol):
    """What a group policy sees of one request's round (a `drafters.base.DraftBuffer`)."""

    n: int  # drafts per drafting step (a block)
    empty: bool  # the first step had nothing to offer: the request takes an AR step (d_b = 0)

    @property
    def confidences(self) -> np.ndarray:
        """q_i of every drafted token (a multiple of n)."""

    @property
    def blocks(self) -> int:
        """Drafting steps run so far."""

    def extend(self, num_blocks: int) -> None:
        """Draft `num_blocks` more blocks."""

    def steps_run(self, steps: int) -> list[str]:
        """The source of every drafting step the first `steps` ran (what `cost.drafting_s` prices)."""


@runtime_checkable
class GroupPolicy(Protocol):
    """Chooses the lengths of a lock-step group's requests and learns from their records."""

    name: str
    d_max: int  # the largest d_b choose_lengths returns

    def choose_lengths(self, chains: Sequence[ChainLike | None]) -> list[int]: ...

    def update(self, records: Sequence[RoundRecord | None]) -> None: ...

    def reset(self) -> None: ...


class GroupMember:
    """The per-request length policy a lock-step request's decoder runs under a group policy: it
    returns the d_b the group chose for this round (`assign`, before the round), after drafting
    every block the group read of this request's chain and those d_b needs. It checks that the
    round's buffer proposes what the group read (the same committed position)."""

    def __init__(self, group: GroupPolicy):
        self.name = group.name
        self.d_max = check_int(group.d_max, "a group's d_max")
        self._assigned: tuple[int, int, np.ndarray] | None = None

    def assign(self, d: int, chain: ChainLike) -> None:
        """The group's d for this request's next round, and the chain it decided on."""
        self._assigned = (int(d), int(chain.blocks), np.array(chain.confidences))

    def choose_length(self, buffer) -> Decision:
        if self._assigned is None:
            raise RuntimeError(f"group policy {self.name}: a round ran without the group's decision")
        d, blocks, seen = self._assigned
        self._assigned = None
        if blocks > buffer.blocks:  # the proposals the group read were made: this round drafts them
            buffer.extend(blocks - buffer.blocks)
        ensure_drafted(buffer, d)
        if not np.array_equal(buffer.confidences[: len(seen)], seen):
            raise RuntimeError(f"group policy {self.name} decided on another chain than this round drafts")
        return Decision(d)

    def update(self, record: RoundRecord) -> None:
        """The group learns from the whole group's records (`GroupPolicy.update`)."""

    def reset(self) -> None:
        """The group is reset by whoever runs it (the engine resets this on a run's first round, after
        the group's first decision was assigned, which stays)."""


def checked_lengths(group: GroupPolicy, chains: Sequence[ChainLike | None], lengths) -> list[int]:
    """The group's lengths, checked: one per request, whole numbers within 0..d_max, 0 for a chain
    that offers no drafts; a finished request's (chain None) is 0 whatever the group said."""
    lengths = list(lengths)
    if len(lengths) != len(chains):
        raise ValueError(f"group policy {group.name} returned {len(lengths)} lengths for {len(chains)} requests")
    out = []
    for chain, d in zip(chains, lengths):
        if chain is None:
            out.append(0)
            continue
        if isinstance(d, bool) or int(d) != d or not 0 <= d <= group.d_max:
            raise ValueError(f"group policy {group.name} chose d = {d!r}, not within 0..{group.d_max}")
        if chain.empty and d:
            raise ValueError(f"group policy {group.name} chose d = {d} for a request whose drafter offered nothing")
        out.append(int(d))
    return out


# -- group forms of per-request rules --------------------------------------------------------------


class EachAlone:
    """Every request of the group decides alone with its own per-request policy, run on its chain
    (as its decoder would run it): the group form of a per-request rule that must be built for the
    group, such as vLLM's batch-size schedule built with the group's size."""

    def __init__(self, policies: Sequence[LengthPolicy], name: str | None = None):
        if not policies:
            raise ValueError("a group needs one policy per request")
        self.policies = list(policies)
        self.name = name or self.policies[0].name
        self.d_max = max(int(p.d_max) for p in self.policies)

    def choose_lengths(self, chains: Sequence[ChainLike | None]) -> list[int]:
        if len(chains) != len(self.policies):
            raise ValueError(f"{len(chains)} chains for a group of {len(self.policies)} policies")
        return [
            0 if chain is None or chain.empty else policy.choose_length(chain).d
            for policy, chain in zip(self.policies, chains)
        ]

    def update(self, records: Sequence[RoundRecord | None]) -> None:
        for policy, record in zip(self.policies, records):
            if record is not None:
                policy.update(record)

    def reset(self) -> None:
        for policy in self.policies:
            policy.reset()


class LiveSchedule:
    """vLLM's batch-size schedule over a lock-step group (mode vllm-schedule's group form; PR #32374):
    each round every unfinished request verifies K(B'), B' the requests still running (vLLM looks K
    up for the batch it is about to run), K from the schedule's `ranges` (`serving.vllm`), at most
    d_max; an empty chain takes its AR step."""

    name = "vllm-schedule"

    def __init__(self, ranges, d_max: int):
        self.ranges = checked_ranges(ranges)
        self.d_max = check_int(d_max, "d_max")

    def choose_lengths(self, chains: Sequence[ChainLike | None]) -> list[int]:
        K = min(schedule_length(self.ranges, max(1, sum(c is not None for c in chains))), self.d_max)
        return [0 if chain is None or chain.empty else K for chain in chains]

    def update(self, records: Sequence[RoundRecord | None]) -> None:
        """One K per batch size: nothing to learn."""

    def reset(self) -> None:
        """One K per batch size: nothing to forget."""


class _DraftingGroup:
    """What the group forms that weigh drafts share: each chain holds one block when the round
    starts, and the group drafts one block more of a request only while that could still win. With
    every later survival of that request at most its last drafted one (survivals never rise), the
    best lengths over those bounding slots, priced with the drafting that request's further blocks
    add, must score above the best over what is drafted. A drafted block is sunk: the round pays
    the drafting of every block drafted (the slowest request's), whatever is admitted.

    A subclass scores lengths (`_best`: the best score and lengths over survivals S, the round's
    drafting seconds given) and learns from records."""

    name: str

    def __init__(self, batch: Batch, d_max: int):
        self.batch = batch
        self.d_max = check_int(d_max, "d_max")
        self._prices: dict[int, float] = {}
        self._requests = 0

    def verify_s(self, tokens: int) -> float:
        """A forward of `tokens` rows over this round's requests spread evenly (`Batch.tokens_s`),
        computed once per size and round."""
        if tokens not in self._prices:
            self._prices[tokens] = self.batch.tokens_s(tokens, self._requests)
        return self._prices[tokens]

    def _best(self, S: list[np.ndarray], draft: float) -> tuple[float, list[int]]:
        raise NotImplementedError

    def choose_lengths(self, chains: Sequence[ChainLike | None]) -> list[int]:
        live = [chain for chain in chains if chain is not None]
        if not live:
            raise ValueError(f"group policy {self.name} needs at least one unfinished request")
        self._requests, self._prices = len(live), {}
        while True:
            S = [np.zeros(0) if c.empty else survival(c.confidences[: self.d_max]) for c in live]
            drafts = [self.batch.drafting_s(c.steps_run(c.blocks)) for c in live]
            score, lengths = self._best(S, max(drafts))
            grow = self._worth_drafting(live, S, drafts, score)
            if grow is None:
                break
            grow.extend(1)
        self._chosen(lengths)
        out, it = [], iter(lengths)
        for chain in chains:
            out.append(0 if chain is None else next(it))
        return out

    def _chosen(self, lengths: list[int]) -> None:
        """The round's lengths over its unfinished requests, once decided."""

    def _worth_drafting(self, live, S, drafts, score: float) -> ChainLike | None:
        """The first request whose next blocks could beat `score`: its later slots bounded by its
        last drafted S, the round's drafting raised to what its further blocks cost (None: none)."""
        for i, chain in enumerate(live):
            drafted = len(S[i])
            if chain.empty or drafted >= self.d_max or S[i][-1] <= 0.0:
                continue
            kept = chain.steps_run(chain.blocks)[: chain.blocks]
            others = max([d for j, d in enumerate(drafts) if j != i], default=0.0)
            for more in range(1, -(-self.d_max // chain.n) - chain.blocks + 1):
                reach = min(self.d_max, (chain.blocks + more) * chain.n)
                bound = list(S)
                bound[i] = np.concatenate([S[i], np.full(reach - drafted, S[i][-1])])
                steps = kept + [kept[-1]] * more + chain.steps_run(chain.blocks)[chain.blocks :]
                if self._best(bound, max(others, self.batch.drafting_s(steps)))[0] > score:
                    return chain
        return None


class GlobalBudget(_DraftingGroup):
    """vLLM's adaptive verification over a lock-step group (mode vllm-adaptive's group form; source:
    vLLM PRs #47808 / #52228, `adaptive_verification.py`, read through `serving.vllm.global_budget`,
    whose docstring states the rule and what it simplifies). Over the B' unfinished requests, with
    S_{b,k} = prod_{j<=k} q_{b,j} the survival of request b's k-th draft (k <= d_max), it admits the
    globally best draft slots: the budget maximising (B' + sum of the admitted S) / (draft cost +
    verify cost), here with this group's prices:

    - verify_cost(tokens): a forward of `tokens` rows over the B' requests spread evenly
      (`Batch.tokens_s`, a token-count table as vLLM profiles one). Ragged it is exactly what the
      round is then charged; padded the round is charged its longest request's rows, which the rule
      does not see (vLLM's tables assume a flattened batch);
    - draft_cost: the round's drafting as lock-step charges it, the slowest request's drafting of
      the blocks drafted (each step by its source, batch-1 times) plus the drafter's upkeep.

    vLLM drafts K tokens for every request before it budgets. Here, as `serving.vllm.VLLMAdaptivePolicy`
    does for one request, each chain holds one block when the round starts and the group drafts
    further blocks as `_DraftingGroup` says, the score being the budget's rate. So with B' = 1 it is
    that policy's rule."""

    name = "vllm-adaptive"

    def __init__(self, batch: Batch, d_max: int, max_slots: int | None = None):
        super().__init__(batch, d_max)
        self.max_slots = max_slots
        self.budget: int | None = None  # the last round's admitted slots over the group

    def _best(self, S: list[np.ndarray], draft: float) -> tuple[float, list[int]]:
        budget, lengths = global_budget(S, lambda requests: draft, self.verify_s, self.max_slots)
        gain = len(S) + sum(float(s[:d].sum()) for s, d in zip(S, lengths))
        return gain / (draft + self.verify_s(len(S) + budget)), lengths

    def _chosen(self, lengths: list[int]) -> None:
        self.budget = sum(lengths)

    def update(self, records: Sequence[RoundRecord | None]) -> None:
        """The rule keeps nothing across rounds (vLLM's online calibration is a separate option)."""

    def reset(self) -> None:
        self.budget = None


class PricedGroup(_DraftingGroup):
    """LibraSpec that knows its price, over a lock-step group (mode libraspec-priced's group form;
    `priced.PricedLibraSpecPolicy` is the rule for one request, docs/ARCHITECTURE.md "Alpha from the
    price list"). Alone, each request would price its choices as if its rows were the round's; in
    lock-step the round is one forward over the group, and whether one request's extra row costs
    anything depends on the others' (padded: nothing below the longest request; ragged: one token's
    share of the forward). So the group applies the same marginal criterion to the group's round:
    it verifies the lengths d_b that maximise

        V * sum_b sum_{j <= d_b} P_{b,j}  -  ( draft + forward(rows) ),   P_{b,j} = q_{b,1} ... q_{b,j},

    the expected accepted drafts over the group, each worth V seconds, less the round's price as
    lock-step charges it: the slowest request's drafting of the blocks drafted plus the upkeep
    (`Batch.drafting_s`), and the forward of the rows d_b + 1 (`Batch.forward_s`, padded or ragged).
    V is the group's modeled seconds per committed token over its earlier rounds (priced as the
    lock-step replay prices them), with one prior pseudo-round in which every request drafts one
    block-diffusion pass, verifies its first block and commits `prior_tau` tokens.

    The lengths searched are exact for each batching: padded, a round's forward depends only on its
    longest request, so for each longest length K every request verifies min(K, its drafts), which
    adds value at no cost; ragged, the forward depends only on the total N = sum_b (d_b + 1), so for
    each N the N - B' best slots over the group are admitted (`serving.vllm.ranked_slots`, P
    non-increasing, so each request's admitted drafts are a prefix). Ties go to the shorter round.
    Further blocks are drafted as `_DraftingGroup` says. Like every group, it decides from the
    chains' q_i and earlier records only."""

    name = "libraspec-priced"

    def __init__(self, batch: Batch, d_max: int, prior_tau: float = DEFAULT_PRIOR_TAU):
        super().__init__(batch, d_max)
        if not (isinstance(prior_tau, (int, float)) and math.isfinite(prior_tau) and prior_tau >= 1):
            raise ValueError(f"prior_tau must be a number >= 1 (tau counts the bonus token), got {prior_tau!r}")
        n = batch.base.n
        self.prior_tokens = float(prior_tau) * batch.size
        self.prior_s = batch.drafting_s([DIFFUSION]) + batch.forward_s([n + 1] * batch.size)
        self.reset()

    def value_s(self) -> float:
        """V: the group's modeled seconds per committed token so far, with the prior pseudo-round."""
        return (self.prior_s + self._seconds) / (self.prior_tokens + self._tokens)

    def _best(self, S: list[np.ndarray], draft: float) -> tuple[float, list[int]]:
        if self.batch.batching == PADDED:
            longest = max(len(s) for s in S)
            candidates = [[min(K, len(s)) for s in S] for K in range(longest + 1)]
        else:
            _, owners = ranked_slots(S)
            candidates = [np.bincount(owners[:N], minlength=len(S)).tolist() for N in range(owners.size + 1)]
        best = None
        for lengths in candidates:  # shortest first: ties keep the shorter round
            gain = sum(float(s[:d].sum()) for s, d in zip(S, lengths))
            net = self._value * gain - draft - self.batch.forward_s([d + 1 for d in lengths])
            if best is None or net > best[0]:
                best = (net, [int(d) for d in lengths])
        return best

    def update(self, records: Sequence[RoundRecord | None]) -> None:
        """Add the round's price as the lock-step replay charges it (the slowest request's drafting,
        the upkeep, the forward of every unfinished request's rows) and its committed tokens to V."""
        live = [r for r in records if r is not None]
        if not live:
            return
        drafting = max(r.modeled_draft_s for r in live)
        rows = [rows_of(r) for r in live]
        self._seconds += drafting + upkeep_s(self.batch.base, self.batch.needs_features) + self.batch.forward_s(rows)
        self._tokens += sum(len(r.committed_tokens) for r in live)
        self._value = self.value_s()

    def reset(self) -> None:
        self._seconds, self._tokens = 0.0, 0
        self._value = self.value_s()


class _Listener:
    """The inner policy of a request's calibration inside `CalibratedGroup`: the group decides, so it
    only listens (`OnlineCalibration` passes each record on to it)."""

    name = "calibration"
    d_max = 1

    def update(self, record: RoundRecord) -> None:
        """Nothing to learn: the group decides."""

    def reset(self) -> None:
        """Nothing to forget."""


class CalibratedGroup:
    """A group policy that sees every request's chain with q_i calibrated online by that request's
    own `serving.vllm.OnlineCalibration` (fitted on that request's earlier rounds only): vLLM's
    online calibration in lock-step. The chains it hands on draft on the real chains."""

    def __init__(self, group: GroupPolicy, requests: int):
        self.group, self.name, self.d_max = group, group.name, group.d_max
        self.calibrations = [OnlineCalibration(_Listener()) for _ in range(check_int(requests, "requests"))]

    def choose_lengths(self, chains: Sequence[ChainLike | None]) -> list[int]:
        if len(chains) != len(self.calibrations):
            raise ValueError(f"{len(chains)} chains for a group of {len(self.calibrations)} requests")
        seen = [None if c is None else CalibratedView(c, cal.calibrate) for c, cal in zip(chains, self.calibrations)]
        return self.group.choose_lengths(seen)

    def update(self, records: Sequence[RoundRecord | None]) -> None:
        for calibration, record in zip(self.calibrations, records):
            if record is not None:
                calibration.update(record)
        self.group.update(records)

    def reset(self) -> None:
        for calibration in self.calibrations:
            calibration.reset()
        self.group.reset()
