"""Cost regimes: where the length choice matters. Replays priced by (a) this machine at batch 1, (b)
this machine at concurrency B in lock-step rounds, (c) a stored profile file, (d) a synthetic
profile; every figure names the profile it came from (`describe`).

(b) Lock-step: B requests are replayed side by side (`lockstep`). Each lock-step round advances
every unfinished request by one of its own rounds, each choosing its own length; the round costs
one target forward over the B' unfinished requests of k = max_b (d_b + 1) rows each (measured
at B = 1, 2, 4, 8 by `profiling.cached_concurrency`, linear between them), the slowest request's
drafting and the drafter upkeep (both at their batch-1 times: a batched drafter is not timed);
a tree of k rows is priced as a chain forward of k rows at that batch size (trees are timed at
batch 1 only). A priced mode (ddtree-priced) prices its own choices with the profile of its batch
size, trees as chain forwards there: its rounds' modeled seconds, and so its V, are a request's alone
at that batch size.
At batch 1 a verified token costs almost nothing on a CPU; under concurrency it costs a real
share of a forward, which is what a length policy trades against acceptance.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..cost import LatencyProfile, upkeep_s
from ..engine import DecodeConfig
from ..modes import AR, get_mode
from ..records import RoundRecord
from ..spec import RunSpec
from .replay import ReplayDecoder
from .trace import DraftTrace

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

    @property
    def speedup(self) -> float:
        return self.ar_seconds / self.seconds


def _at_batch(profiles: dict[int, LatencyProfile], B: int, k: int) -> float:
    """A forward of B sequences of k rows: the measured batch sizes, linear between them."""
    sizes = sorted(profiles)
    if B in profiles:
        return profiles[B].verify_time(k)
    lo = max([s for s in sizes if s < B], default=sizes[0])
    hi = min([s for s in sizes if s > B], default=sizes[-1])
    a, b = profiles[lo].verify_time(k), profiles[hi].verify_time(k)
    return a if hi == lo else a + (b - a) * (B - lo) / (hi - lo)


def _rows(record: RoundRecord) -> int:
    return (record.tree_size if record.tree_size else record.chosen_length) + 1


def lockstep(
    traces: list[DraftTrace],
    mode: str,
    profiles: dict[int, LatencyProfile],
    settings: RunSpec = RunSpec(),
) -> Lockstep:
    """Replay `traces` (one per request) in `mode` with `settings` in lock-step rounds (module
    docstring). `profiles` maps batch sizes to concurrency profiles (`profiling.cached_concurrency`)."""
    if not traces:
        raise ValueError("lock-step replay needs at least one request")
    base = profiles[min(profiles)]
    # a priced mode prices its choices as a request among B: the profile of the largest measured
    # batch size up to B, its trees priced as chain forwards at that size (as the rounds are below);
    # so one request alone in lock-step is priced as a chain, not as its own replay with tree timings
    B = max([b for b in profiles if b <= len(traces)], default=min(profiles))
    own = dataclasses.replace(profiles[B], tree_rows=(), tree_verify_s=()) if get_mode(mode).priced else base
    runs = []
    for trace in traces:
        checked, _ = settings.checked(trace.n, context=trace.max_positions)
        decoder = ReplayDecoder.from_trace(trace, own)
        config = DecodeConfig(max_new_tokens=trace.max_new_tokens, lookahead=min(trace.lookahead, checked.d_max))
        runs.append(iter(decoder.run(list(trace.prompt), mode, get_mode(mode).policy(checked, own), config)))
    upkeep = upkeep_s(own, traces[0].needs_features)
    seconds = rounds = tokens = rows = own_rounds = sum_d = 0
    while runs:
        records = [next(run) for run in runs]
        k = max(_rows(r) for r in records)
        drafting = max(r.modeled_draft_s for r in records)  # the longest request's drafting (AR: none)
        seconds += drafting + _at_batch(profiles, len(records), k) + (upkeep if mode != AR else 0.0)
        rounds += 1
        tokens += sum(len(r.committed_tokens) for r in records)
        rows += sum(_rows(r) for r in records)
        own_rounds += len(records)
        sum_d += sum(r.chosen_length for r in records)
        runs = [run for run, r in zip(runs, records) if not r.finished]
    longest = max(len(t.output) for t in traces)
    lengths = np.array([len(t.output) for t in traces])
    ar = sum(_at_batch(profiles, int((lengths > g).sum()), 1) for g in range(longest))
    return Lockstep(float(seconds), float(ar), rounds, tokens, rows, own_rounds, sum_d)
