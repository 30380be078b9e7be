"""The what-if service: traces of a visitor's greedy races and the profiles that price their replays.

No gradio here. A race's AR baseline is the target's greedy text; `WhatIf.trace` records what a
drafter proposes from every position of it (`analysis.trace.iter_trace`, one anchor per model
lock, so a race waiting for the model waits for one anchor at most) and keeps the last few
traces. `WhatIf.planner` pairs a trace with a latency profile: this machine at batch 1 (the
session's measured profile), B requests like this one in lock-step (forwards measured at
batch B, `profiling.cached_concurrency`), a stored profile file (`assets/profiles/*.json`) or a
synthetic one; its plans are modeled replays and say so.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path
from typing import Iterator

from libraspec.analysis.recommend import Recommendation, recommend_alpha
from libraspec.analysis.regimes import describe, synthetic_profile
from libraspec.analysis.trace import DraftTrace, iter_trace
from libraspec.analysis.whatif import Planner
from libraspec.cost import LatencyProfile
from libraspec.drafters import DRAFTERS, round_drafting
from libraspec.paths import ASSETS
from libraspec.profiling import cached_concurrency, concurrency_estimate_s, concurrency_stored
from libraspec.records import committed_text

from .run import LOCAL, Run
from .session import Session

PROFILES_DIR = ASSETS / "profiles"
LOOKAHEAD = 48  # drafts traced per position: the largest d_max and static length a what-if offers
BATCH_1 = "this machine, batch 1 (measured)"
SYNTHETIC = "synthetic (modeled: t0 + c per token, draft per step)"
BATCHES = (2, 4, 8)
KEPT_TRACES = 6


def lockstep_choice(B: int) -> str:
    return f"this machine, {B} requests like this one in lock-step (measured forwards)"


def stored_profiles() -> dict[str, Path]:
    """Profile files committed with the app (for example measured on a GPU), by choice label."""
    return {f"stored: {p.stem}": p for p in sorted(PROFILES_DIR.glob("*.json"))}


def profile_choices() -> list[str]:
    return [BATCH_1] + [lockstep_choice(B) for B in BATCHES] + list(stored_profiles()) + [SYNTHETIC]


class WhatIf:
    """Traces and planners of one app (every visitor's, each kept under its run's owner)."""

    def __init__(self, session: Session):
        self.session = session
        self._traces: OrderedDict[tuple[str, str], DraftTrace] = OrderedDict()
        self._planners: OrderedDict[tuple, Planner] = OrderedDict()
        self._concurrency: dict[int, LatencyProfile] | None = None
        self._recommended: OrderedDict[tuple, Recommendation] = OrderedDict()
        self._lock = threading.Lock()

    def races(self, owner: str = LOCAL) -> list[tuple[str, str]]:
        """(label, run id) of `owner`'s finished greedy races, newest first: the texts a what-if can replay."""
        out = []
        for run in reversed(self.session.races.runs(owner)):
            if run.finished and run.settings.temperature == 0 and run.ar_records:
                words = " ".join(run.prompt.split())
                words = words if len(words) <= 48 else words[:47] + "…"
                out.append((f"{run.run_id}: {words} ({run.drafter}, {len(output_of(run))} tokens)", run.run_id))
        return out

    def trace(self, run_id: str, drafter: str, owner: str = LOCAL) -> Iterator[str | DraftTrace]:
        """Status lines while the trace of `owner`'s race `run_id` with `drafter` is recorded, then the
        trace (at once when it is kept)."""
        run = self.session.races.get_run(run_id, owner)
        if run.settings.temperature != 0:
            raise ValueError("a what-if replays greedy races only (temperature 0): a sampled text is not fixed")
        if drafter not in DRAFTERS:
            raise ValueError(f"unknown drafter {drafter!r}; choose one of {', '.join(DRAFTERS)}")
        key = (run.run_id, drafter)
        with self._lock:
            kept = self._traces.get(key)
        if kept is not None:
            yield kept
            return
        for line in self.session.load():
            yield line
        pair, output = self.session.pair, output_of(run)
        if pair.name != run.model:
            raise ValueError(f"race {run.run_id} ran on {run.model}; the app now holds {pair.name}")
        ids = pair.encode_prompt(run.prompt)
        steps = iter_trace(pair, drafter, ids, output, run.settings.max_new_tokens, LOOKAHEAD, meta={"run": run.run_id})
        trace = None
        for item in self.session.exclusive(steps):
            if isinstance(item, DraftTrace):
                trace = item
            elif item % 16 == 0 or item == len(output):
                yield f"Recording what the {drafter} drafter proposes from each position: {item}/{len(output)}…"
        if trace is None:
            raise ValueError("the trace was interrupted by another run; press Replay again")
        with self._lock:
            self._traces[key] = trace
            while len(self._traces) > KEPT_TRACES:
                self._traces.popitem(last=False)
        yield trace

    def kept(self, run_id: str, drafter: str, owner: str = LOCAL) -> DraftTrace | None:
        """The kept trace of `owner`'s race with `drafter`, None when it was never recorded or dropped."""
        run = self.session.races.get_run(run_id, owner)
        with self._lock:
            return self._traces.get((run.run_id, drafter))

    def profile(
        self, choice: str, t0_ms: float = 20.0, per_token_ms: float = 2.0, draft_ms: float = 5.0, measure: bool = True
    ) -> LatencyProfile:
        """The latency profile a choice of `profile_choices` names. Lock-step profiles are measured
        once per machine and pair (cached on disk) as the active run under the model lock, and only
        when `measure` (a queued event): without it, a profile not measured yet is a ValueError."""
        if choice == BATCH_1:
            profile = self.session.profile() if measure else self.session.profile_now()  # the latter never waits
            if profile is None:
                raise ValueError("this machine's profile is not measured yet: run a race first")
            return profile
        if choice == SYNTHETIC:
            values = (t0_ms, per_token_ms, draft_ms)
            if not all(isinstance(v, (int, float)) and 0 <= v <= 10_000 for v in values) or t0_ms <= 0:
                raise ValueError("synthetic costs must be numbers of milliseconds, t0 > 0, the others >= 0")
            return synthetic_profile(t0_ms / 1e3, per_token_ms / 1e3, draft_ms / 1e3, self.session.n, LOOKAHEAD + 1)
        stored = stored_profiles()
        if choice in stored:
            profile = LatencyProfile.from_json(stored[choice])
            return LatencyProfile.from_dict(profile.to_dict() | {"meta": profile.meta | {"file": stored[choice].name}})
        for B in BATCHES:
            if choice == lockstep_choice(B):
                with self._lock:
                    measured = self._concurrency
                if measured is None:
                    if not measure:
                        raise ValueError(
                            "the lock-step profiles are measured once on this machine (a minute or two): "
                            "press Replay to measure them"
                        )

                    def measurement():
                        yield cached_concurrency(self.session.pair, batches=(1,) + BATCHES)

                    measured = next(iter(self.session.exclusive(measurement())), None)
                    if measured is None:
                        raise ValueError("measuring the lock-step profiles was interrupted by another run; try again")
                    with self._lock:
                        self._concurrency = measured
                return measured[B]
        raise ValueError(f"unknown profile {choice!r}; choose one of {', '.join(profile_choices())}")

    def recommendation(self, owner: str, drafter: str, profile: LatencyProfile | None = None) -> Recommendation | None:
        """The recommended alpha for `drafter` under `profile` (None: this machine at batch 1), replayed
        on `owner`'s kept traces of that drafter (`analysis.recommend`); None before any was recorded (a
        What-if Replay records one) or when this machine's profile is not measured yet. Kept per set of
        traces and profile."""
        mine = {run.run_id for run in self.session.races.runs(owner)}
        with self._lock:
            traces = [t for (run_id, d), t in self._traces.items() if d == drafter and run_id in mine]
        if not traces:
            return None
        if profile is None:
            try:
                profile = self.profile(BATCH_1, measure=False)
            except ValueError:
                return None
        key = (tuple(id(t) for t in traces), describe(profile), tuple(profile.verify_s))
        with self._lock:
            found = self._recommended.get(key)
        if found is None:
            found = recommend_alpha(traces, profile)
            with self._lock:
                self._recommended[key] = found
                while len(self._recommended) > KEPT_TRACES * 4:
                    self._recommended.popitem(last=False)
        return found

    def measuring_note(self, choice: str) -> str | None:
        """What a Replay under `choice` must first measure, with an estimate of how long: the lock-step
        forwards when neither this page's app nor the disk holds them; None when nothing is measured."""
        if choice not in [lockstep_choice(B) for B in BATCHES]:
            return None
        with self._lock:
            if self._concurrency is not None:
                return None
        batches = (1,) + BATCHES
        if concurrency_stored(self.session.pair, batches=batches):
            return None
        estimate = concurrency_estimate_s(self.session.profile(), batches=batches)
        return (
            f"Measuring target forwards of {', '.join(map(str, batches))} requests in lock-step, once on this "
            f"machine (about {estimate:.0f} s; kept on disk for every later replay)…"
        )

    def planner(self, trace: DraftTrace, profile: LatencyProfile) -> Planner:
        """The planner of a trace under a profile, kept so that moving a slider replays LibraSpec only.
        The key is everything a plan reads of the profile: its description and every price."""
        if round_drafting(trace.drafter, (), trace.n).n == 0 and profile.n != trace.n:  # a head prices per draft
            raise ValueError(
                f"the profile {describe(profile)} prices drafting passes of n = {profile.n} drafts; this "
                f"race's drafter drafts n = {trace.n}: choose another profile"
            )
        key = (
            id(trace),
            describe(profile),
            profile.n,
            tuple(profile.verify_s),
            tuple(profile.draft_s),
            tuple(profile.tree_rows),
            tuple(profile.tree_verify_s),
            profile.lookup_s,
            profile.fit_s,
            profile.eagle_s,
            profile.eagle_fit_s,
        )
        with self._lock:
            planner = self._planners.get(key)
            if planner is None or planner.trace is not trace:
                planner = self._planners[key] = Planner(trace, profile)
                while len(self._planners) > KEPT_TRACES * 4:
                    self._planners.popitem(last=False)
            return planner


def output_of(run: Run) -> list[int]:
    """The race's greedy text: what its AR baseline committed."""
    return committed_text(run.ar_records)
