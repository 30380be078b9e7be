"""One race's data: `Run`, its records per mode and the numbers read from them (summaries,
measured totals and their noise, finish ranks). `races` makes runs; `race_words` words them."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from libraspec.records import NOISE_Z, RoundRecord, RunSummary, records_to_frame, summarize, timing_noise_s
from libraspec.spec import RunSpec

from .render import TextSegments
from .settings import DEFAULT_RACE_MODES

RACE_MODES = DEFAULT_RACE_MODES  # what a race holds unless the visitor chooses (`check_race_modes`)
LOCAL = "local"  # the owner of runs made outside the app


@dataclass
class Run:
    """One race: its records per mode, the AR baseline, texts and summaries."""

    run_id: str
    prompt: str
    settings: RunSpec
    notes: list[str]
    ar_records: list[RoundRecord]
    model: str  # the pair's name
    n: int  # the pair's drafts per step
    owner: str  # who may list, inspect and export it (see the module docstring)
    drafter: str = "dflash"  # the drafter every mode drafted with (after any fallback)
    modes: tuple[str, ...] = RACE_MODES  # the raced modes, in column order (`check_race_modes`)
    records: dict[str, list[RoundRecord]] = field(default_factory=dict)
    segments: dict[str, TextSegments] = field(default_factory=dict)
    finish_order: list[str] = field(default_factory=list)
    finished: bool = False

    def summary(self, mode: str) -> RunSummary | None:
        records = self.records.get(mode)
        return summarize(records, self.ar_records) if records else None

    def seconds(self, mode: str) -> float:
        """The mode's measured seconds so far (drafting, policy and verification of every round)."""
        return self.records[mode][-1].cumulative_s

    def noise_s(self, mode: str) -> float:
        """Standard deviation of the mode's measured total that timing noise alone explains (`timing_noise_s`)."""
        return timing_noise_s(self.records[mode])

    def noise_known(self, mode: str) -> bool:
        """Whether the mode ran the two rounds its timing noise is measured from (`timing_noise_s`)."""
        return len(self.records.get(mode, [])) >= 2

    def within_noise(self, a: str, b: str) -> bool:
        """Whether modes a and b finished closer than NOISE_Z standard deviations of their noise; a
        mode of a single round has no measured noise, so no gap from it can be told from noise."""
        if not (self.noise_known(a) and self.noise_known(b)):
            return True
        spread = math.hypot(self.noise_s(a), self.noise_s(b))
        return abs(self.seconds(a) - self.seconds(b)) <= NOISE_Z * spread

    def finished_modes(self) -> list[str]:
        """The finished modes, fastest measured total first."""
        return sorted(self.finish_order, key=self.seconds)

    def rank(self, mode: str) -> int | None:
        """Place among the finished modes by final measured time (not by event order: the race
        picks the next mode by its clock before a round, so a last round can overtake): 1 + the
        finished modes faster beyond timing noise, so modes within noise of each other share a
        place and no rank is claimed inside the noise (the verdict's rule)."""
        finished = self.finished_modes()
        if mode not in finished:
            return None
        mine = self.seconds(mode)
        return 1 + sum(self.seconds(m) < mine and not self.within_noise(m, mode) for m in finished if m != mode)

    def tied_with(self, mode: str) -> list[str]:
        """The other finished modes whose measured total is within noise of this one's."""
        if mode not in self.finish_order:
            return []
        return [m for m in self.finished_modes() if m != mode and self.within_noise(mode, m)]

    def last_drafted_round(self, mode: str) -> int:
        """Index of the mode's last round that submitted drafts (d >= 1); 0 if none."""
        rounds = [r.round_index for r in self.records.get(mode, []) if r.chosen_length > 0]
        return rounds[-1] if rounds else 0

    def frame(self, with_ar: bool = True) -> pd.DataFrame:
        """Every round record as one row (`records_to_frame`), plus the run's drafter in column `drafter`."""
        records = list(self.ar_records) if with_ar else []
        for mode in self.modes:
            records += self.records.get(mode, [])
        frame = records_to_frame(records)
        frame["drafter"] = self.drafter
        return frame

    def ar_per_token(self) -> tuple[float | None, float | None]:
        """AR measured and modeled seconds per token (the speedup denominators' numerators)."""
        if not self.ar_records:
            return None, None
        ar = summarize(self.ar_records)
        return ar.seconds / ar.tokens, ar.modeled_seconds / ar.tokens

    def text(self, mode: str) -> str:
        segments = self.segments.get(mode)
        return segments.text if segments is not None else ""

    def longest_context(self) -> int | None:
        """The most committed tokens a round started from: the context its last forwards saw."""
        return max((r.start_position for records in self.records.values() for r in records), default=None)

    def verified_rows(self) -> int | None:
        """The most rows a chain round verified (d + 1): how far a profile plot must reach."""
        return max(
            (r.chosen_length + 1 for records in self.records.values() for r in records if not r.tree_size),
            default=None,
        )
