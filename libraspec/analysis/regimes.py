"""Cost regimes: where the length choice matters. Replays priced by (a) this machine at batch 1, (b)
this machine at concurrency B in lock-step rounds, (c) a stored profile file, (d) a synthetic
profile; every figure names the profile it came from (`describe`).

(b) Lock-step: B requests are replayed side by side (`lockstep`). Each lock-step round advances
every unfinished request by one of its own rounds. A per-request mode lets each request choose its
own length; a mode with a group form (`modes.Mode.group`, libraspec/group.py) chooses the lengths
d_b of every unfinished request at once from their chains, and each request's round then runs the
engine's code with the group's d_b. The round costs one target forward over the B' unfinished
requests (measured at B = 1, 2, 4, 8 by `profiling.cached_concurrency`, linear between them),
priced two ways (`batching`, `group.forward_s`): padded, B' sequences of k = max_b (d_b + 1) rows
each (every request pays the longest); ragged, the group's N = sum_b (d_b + 1) verified tokens,
priced as the measured forward of B' sequences of N / B' rows each (interpolated in k between
whole rows and in B between the measured sizes), as engines that flatten the batch do. Plus the
slowest request's drafting and the drafter upkeep (both at their batch-1 times: a batched drafter
is not timed); a tree of k rows is priced as a chain forward of k rows at that batch size (trees
are timed at batch 1 only). A priced mode (ddtree-priced) prices its own choices with the profile
of its batch size, trees as chain forwards there: its rounds' modeled seconds, and so its V, are a
request's alone at that batch size, whichever batching prices the group.
At batch 1 a verified token costs almost nothing on a CPU; under concurrency it costs a real
share of a forward, which is what a length policy trades against acceptance.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from ..cost import EAGLE, LatencyProfile, upkeep_s
from ..group import (
    PADDED,
    Batch,
    CalibratedGroup,
    GroupMember,
    at_batch,
    check_batching,
    checked_lengths,
    forward_s,
    rows_of,
)
from ..modes import AR, get_mode
from ..records import RoundRecord
from ..serving.vllm import OnlineCalibration
from ..spec import RunSpec
from .replay import ReplayDecoder, trace_config
from .trace import DraftTrace, TraceBuffer

SYNTHETIC = "synthetic"


def synthetic_profile(t0_s: float, per_token_s: float, draft_s: float, n: int, max_tokens: int = 65) -> LatencyProfile:
    """(d): a target forward of k tokens costs t0 + per_token * k, a drafting step `draft_s`."""
    return LatencyProfile.from_linear(t0_s, per_token_s, draft_s, n, max_tokens, meta={"source": SYNTHETIC})


def describe(profile: LatencyProfile) -> str:
    """What a profile is, in the words every replayed figure carries (measured, stored or modeled)."""
    meta = profile.meta
    if meta.get("source") in (SYNTHETIC, "linear"):  # `LatencyProfile.from_linear`: made up, not measured
        return (
            f"synthetic profile (modeled): t0 {meta['t0'] * 1e3:g} ms + {meta['c'] * 1e3:g} ms per verified token, "
            f"{meta['draft_per_block'] * 1e3:g} ms per drafting step"
        )
    where = meta.get("file")
    device = meta.get("device", "?")
    if "batch" in meta:
        B = meta["batch"]
        return f"{device}, {B} requests in lock-step (forwards measured at batch {B}; drafting at batch 1)"
    contexts = meta.get("context_fit", {}).get("contexts") if profile.context_k else None
    timed = f"; forwards timed after {', '.join(f'{c:,}' for c in contexts)} tokens" if contexts else ""
    if where:
        return f"stored profile {where} ({device}, measured there{timed})"
    return f"this machine, batch 1 ({device}, measured{timed})"


@dataclass(frozen=True)
class Lockstep:
    """B requests replayed in lock-step rounds under a concurrency profile."""

    seconds: float  # modeled seconds until every request finished
    ar_seconds: float  # the same requests decoded AR in lock-step
    rounds: int  # lock-step rounds (one batched forward each)
    tokens: int  # committed over all requests
    verified_rows: int  # rows verified over all requests (k_b = d_b + 1 per request and round)
    request_rounds: int  # the requests' own rounds, summed (tau = tokens / request_rounds)
    sum_d: int  # the requests' chosen lengths d_b, summed over their rounds
    batching: str = PADDED  # how each round's forward was priced (`group.BATCHINGS`)
    group: str = ""  # the group policy that chose the lengths ("" when each request chose alone)
    records: tuple[tuple[RoundRecord, ...], ...] = field(default=(), compare=False, repr=False)  # per request

    @property
    def speedup(self) -> float:
        return self.ar_seconds / self.seconds


_at_batch = at_batch  # a forward of B sequences of k rows (libraspec/group.py)


def _chain(trace: DraftTrace, g: int) -> TraceBuffer:
    """What the drafter proposes from output position g, its first block drafted: the chain a group
    policy decides on (the round's own buffer reads the same trace at the same position)."""
    chain = TraceBuffer(trace, g)
    chain.extend(1)
    return chain


def lockstep(
    traces: list[DraftTrace],
    mode: str,
    profiles: dict[int, LatencyProfile],
    settings: RunSpec = RunSpec(),
    batching: str = PADDED,
    online_q: bool = False,
) -> Lockstep:
    """Replay `traces` (one per request) in `mode` with `settings` in lock-step rounds, each round's
    forward priced `batching` ("padded" or "ragged", module docstring). `profiles` maps batch sizes
    to concurrency profiles (`profiling.cached_concurrency`). A mode with a group form
    (`Mode.group`) chooses every request's length as a group (`group.GroupPolicy`), built for these
    B = len(traces) requests and this batching; every other mode lets each request choose alone.
    `online_q`: every request's q_i calibrated online from its own earlier rounds
    (`serving.vllm.OnlineCalibration`; a group sees each chain through its request's calibration)."""
    if not traces:
        raise ValueError("lock-step replay needs at least one request")
    check_batching(batching)
    spec = get_mode(mode)
    base = profiles[min(profiles)]
    # a priced mode prices its choices as a request among B: the profile of the largest measured
    # batch size up to B, its trees priced as chain forwards at that size (as the rounds are below);
    # so one request alone in lock-step is priced as a chain, not as its own replay with tree timings
    B = max([b for b in profiles if b <= len(traces)], default=min(profiles))
    own = dataclasses.replace(profiles[B], tree_rows=(), tree_verify_s=()) if spec.priced else base
    checked = [settings.checked(trace.n, context=trace.max_positions)[0] for trace in traces]
    group = None
    if spec.group is not None:
        if len({trace.n for trace in traces}) > 1 or len({trace.drafter for trace in traces}) > 1:
            raise ValueError("a group policy decides for requests of one drafter (one n)")
        batch = Batch(profiles, len(traces), batching, traces[0].needs_features)
        group = spec.group(checked[0], batch)
        if online_q:
            group = CalibratedGroup(group, len(traces))
        group.reset()
    members = [GroupMember(group) if group is not None else None for _ in traces]
    runs = []
    for trace, spec_b, member in zip(traces, checked, members):
        decoder = ReplayDecoder.from_trace(trace, own)
        config = trace_config(trace, spec_b)
        policy = member if member is not None else spec.policy(spec_b, own)
        if online_q and member is None:
            policy = OnlineCalibration(policy)
        runs.append(iter(decoder.run(list(trace.prompt), mode, policy, config)))
    upkeep = upkeep_s(own, traces[0].needs_features, (EAGLE,) if traces[0].drafter == EAGLE else ())
    seconds = rounds = tokens = rows = own_rounds = sum_d = 0
    history: list[list[RoundRecord]] = [[] for _ in traces]
    positions = [0] * len(traces)  # each request's committed output tokens
    live = list(range(len(traces)))
    while live:
        if group is not None:  # the group decides every unfinished request's length from its chain
            chains = [_chain(traces[b], positions[b]) if b in live else None for b in range(len(traces))]
            lengths = checked_lengths(group, chains, group.choose_lengths(chains))
            for b in live:
                members[b].assign(lengths[b], chains[b])
        records = [next(runs[b]) for b in live]
        drafting = max(r.modeled_draft_s for r in records)  # the longest request's drafting (AR: none)
        forward = forward_s(profiles, [rows_of(r) for r in records], batching)
        seconds += drafting + forward + (upkeep if mode != AR else 0.0)
        rounds += 1
        tokens += sum(len(r.committed_tokens) for r in records)
        rows += sum(rows_of(r) for r in records)
        own_rounds += len(records)
        sum_d += sum(r.chosen_length for r in records)
        for b, r in zip(live, records):
            history[b].append(r)
            positions[b] = r.cumulative_tokens
        if group is not None:
            by_request = dict(zip(live, records))
            group.update([by_request.get(b) for b in range(len(traces))])
        live = [b for b, r in zip(live, records) if not r.finished]
    longest = max(len(t.output) for t in traces)
    lengths = np.array([len(t.output) for t in traces])
    ar = sum(_at_batch(profiles, int((lengths > g).sum()), 1) for g in range(longest))
    return Lockstep(
        float(seconds),
        float(ar),
        rounds,
        tokens,
        rows,
        own_rounds,
        sum_d,
        batching,
        group.name if group is not None else "",
        tuple(tuple(h) for h in history),
    )
