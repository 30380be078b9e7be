"""The app's races: the `Run` data class, the AR baseline cache, the live race (`Races.stream`)
and the runs each visitor keeps (in memory, and on disk on a ZeroGPU Space).

A `Run` holds a race's records and the numbers read from them (summaries, measured totals and
their noise, finish ranks); its words (verdict, progress, notes, round narratives) are
`race_words`'. Every model call goes through the `Session` (`session.exclusive`), one at a time.

Per-user state: each race records its owner (the tabs pass the gradio session of the page or
API client), and only that owner lists, inspects or exports it. Runs made outside the app
(scripts, tests) belong to `LOCAL`.
"""

from __future__ import annotations

import functools
import math
import os
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Iterator

import pandas as pd

from libraspec.device import on_zero_gpu
from libraspec.engine import DecodeConfig, race, remodel_ar
from libraspec.modes import AR, MODES, PAPER
from libraspec.paths import cache_root
from libraspec.profiling import PROFILE_TOLERANCE, profile_check
from libraspec.records import (
    NOISE_Z,
    RoundRecord,
    RunSummary,
    committed_text,
    records_to_frame,
    summarize,
    timing_noise_s,
    write_csv,
    write_parquet,
)
from libraspec.spec import Checked, RunSpec

from .race_words import alpha_advice, drift, kept_profile, load_change_note, race_progress, remeasured
from .render import TextSegments, eta_text
from .run_store import RunStore
from .settings import DEFAULT_RACE_MODES, check_prompt_length, check_race_modes, check_settings, suggest_alpha

RACE_MODES = DEFAULT_RACE_MODES  # what a race holds unless the visitor chooses (`check_race_modes`)
UPDATE_INTERVAL_S = 0.25  # the race view refreshes at most 4 times a second
KEPT_RUNS = 8
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


@dataclass(frozen=True)
class Snapshot:
    """What the race view shows at one moment of a run."""

    status: str
    run: Run | None
    final: bool = False
    phase: str = "race"  # "load" | "baseline" | "race"
    progress: str = ""  # tokens per mode so far and the time left, while decoding
    checked: Checked | None = None  # the settings the run uses and what their check changed (once, first)


class Races:
    """The session's races and the runs they leave, per owner."""

    def __init__(self, session, runs_dir: str | os.PathLike | None = None):
        """`runs_dir`: where finished runs are also written (default: on a ZeroGPU Space, whose GPU
        calls run in forked workers, the cache folder's `runs/`; elsewhere memory only)."""
        self.session = session
        self._ar_cache: OrderedDict[tuple, list[RoundRecord]] = OrderedDict()
        self._runs: OrderedDict[str, Run] = OrderedDict()
        if runs_dir is None and on_zero_gpu():
            runs_dir = os.path.join(cache_root(), "runs")
        self._store = RunStore(runs_dir, KEPT_RUNS) if runs_dir is not None else None

    def prepare(self, prompt: str, settings: RunSpec) -> tuple[list[int], Checked]:
        """Encode the prompt and check the settings (`check_settings`: clamps, each noted by field)."""
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError("the prompt is empty: type a question or instruction")
        pair = self.session.pair
        ids = pair.encode_prompt(prompt)
        check_prompt_length(len(ids), pair.target.device.type)
        return ids, check_settings(settings, pair.n, pair.max_context, len(ids))

    def _ar_baseline(self, ids: list[int], prompt: str, settings: RunSpec) -> Iterator[tuple[int, list]]:
        """AR decoding of the same prompt and settings, cached once it finished; yields (tokens so
        far, records), then (-1, records). A baseline another run took the model from ends unfinished
        and is not kept."""
        key = (self.session.pair.name, prompt, settings.max_new_tokens, settings.temperature, settings.seed)
        if key in self._ar_cache:
            self._ar_cache.move_to_end(key)
            yield -1, self._ar_cache[key]
            return
        config = DecodeConfig(
            max_new_tokens=settings.max_new_tokens, temperature=settings.temperature, seed=settings.seed
        )
        iterator = self.session.decoder.run(ids, AR, None, config)
        records = []
        for record in self.session.exclusive(iterator):
            records.append(record)
            yield record.cumulative_tokens, records
        if records and records[-1].finished:
            self._ar_cache[key] = records
        while len(self._ar_cache) > KEPT_RUNS * 4:
            self._ar_cache.popitem(last=False)
        yield -1, records

    def stream(
        self, prompt: str, settings: RunSpec, owner: str = LOCAL, drafter: str | None = None, modes=None
    ) -> Iterator[Snapshot]:
        """Race `modes` (`check_race_modes`; None: static, LibraSpec and oracle) on one prompt for
        `owner`, drafting with `drafter` (None or "": the pair's default); snapshots at most every
        0.25 s, each with a progress line."""
        modes = check_race_modes(modes)
        for line in self.session.load():
            yield Snapshot(line, None, phase="load")
        ids, checked = self.prepare(prompt, settings)
        settings, pair = checked.spec, self.session.pair
        decoder, fallback = self.session.decoder_for(drafter)
        yield Snapshot("Starting…", None, phase="baseline", checked=checked)
        ar_records: list[RoundRecord] = []
        last, started, fresh = 0.0, time.monotonic(), False
        for done, ar_records in self._ar_baseline(ids, prompt, settings):
            fresh = fresh or done >= 0
            if done >= 0 and time.monotonic() - last >= UPDATE_INTERVAL_S:
                last = time.monotonic()
                progress = (
                    f"autoregressive baseline {done}/{settings.max_new_tokens} tokens · "
                    f"{eta_text(done, settings.max_new_tokens, last - started)} for the baseline, "
                    "then the race"
                )
                yield Snapshot(
                    "Measuring the autoregressive baseline (once per prompt and settings)…",
                    None,
                    phase="baseline",
                    progress=progress,
                )
        if not ar_records or not ar_records[-1].finished:
            yield Snapshot(
                "Stopped: another run took the model before the autoregressive baseline finished; nothing was raced.",
                None,
                final=True,
                phase="baseline",
            )
            return
        notes = checked.note_list + ([fallback] if fallback else [])
        # a baseline measured just now against the profile (a cached one was checked when it was measured)
        check = profile_check(decoder.profile, ar_records, PROFILE_TOLERANCE) if fresh else {"ok": True}
        if not check["ok"]:  # the baseline ran off the profile: confirm with the AR step itself (a second)
            yield Snapshot(f"Checking the latency profile: {drift(check)}…", None, phase="baseline")
            now = self.session.ar_step_check()
            if now["ok"]:  # the step agrees with the profile: the baseline's own noise, not a change of load
                notes.append(kept_profile(check, now))
            else:  # the profile was measured under another load: its modeled times would mislead
                yield Snapshot(f"Re-measuring the latency profile: {drift(check)}…", None, phase="baseline")
                self.session.remeasure_profile()
                ar_records = remodel_ar(ar_records, decoder.profile)
                notes.append(remeasured(check, profile_check(decoder.profile, ar_records, PROFILE_TOLERANCE)))
        run = Run(
            uuid.uuid4().hex[:12],
            prompt,
            settings,
            notes,
            ar_records,
            pair.name,
            pair.n,
            owner,
            decoder.drafter.name,
            modes,
        )
        for mode in modes:
            # the tokenizer's decode, not the pair's: a stored run must not keep a switched-out pair's
            # weights alive (a GPU holds one pair at a time)
            run.segments[mode] = TextSegments(functools.partial(pair.tokenizer.decode, skip_special_tokens=True))
        self._keep(run)
        entries = {mode: (mode, MODES[mode].policy(settings, decoder.profile)) for mode in modes}
        config = DecodeConfig(
            max_new_tokens=settings.max_new_tokens,
            temperature=settings.temperature,
            seed=settings.seed,
            lookahead=settings.d_max,
            annotate_oracle=True,
            # greedy, the baseline's text is what every mode commits: the oracle's look-ahead reads it
            greedy_text=committed_text(ar_records) if settings.temperature == 0 else None,
        )
        iterator = race(decoder, ids, entries, config)
        last, started = 0.0, time.monotonic()
        for mode, record in self.session.exclusive(iterator):
            run.records.setdefault(mode, []).append(record)
            run.segments[mode].add(record)
            if record.finished:
                run.finish_order.append(mode)
            if record.finished or time.monotonic() - last >= UPDATE_INTERVAL_S:
                last = time.monotonic()
                yield Snapshot("Racing…", run, progress=race_progress(run, last - started))
        run.finished = len(run.finish_order) == len(modes)
        load_note = load_change_note(run.ar_records, [r for mode in modes for r in run.records.get(mode, [])])
        if load_note:
            run.notes.append(load_note)
        if self._store is not None:
            self._store.save(run)
        yield Snapshot("Finished." if run.finished else "Stopped.", run, final=True)

    def remodel_baselines(self, profile) -> None:
        """Cached AR baselines priced by `profile` (after it was measured again)."""
        for key, records in self._ar_cache.items():
            self._ar_cache[key] = remodel_ar(records, profile)

    def suggested_alpha(self, owner: str = LOCAL) -> tuple[float, str]:
        """Section 3.4's alpha = T_verify / (tau c) from this machine's latency profile and the mean tau
        and d of `owner`'s last race's LibraSpec rounds: (alpha, how it was computed)."""
        profile = self.session.profile()
        if profile is None:
            raise ValueError("the model is not loaded yet: wait until the status says Ready")
        runs = [run for run in self.runs(owner) if run.records.get(PAPER)]
        if not runs:
            raise ValueError(
                "no race yet: the suggestion needs the mean tau and d of your LibraSpec rounds, so run one race first"
            )
        suggestion = suggest_alpha(runs[-1].records[PAPER], profile)
        return suggestion.alpha, f"{alpha_advice(suggestion)} of your last race"

    # -- stored runs --------------------------------------------------------------------------

    def _keep(self, run: Run) -> None:
        self._runs[run.run_id] = run
        while len(self._runs) > KEPT_RUNS:
            self._runs.popitem(last=False)

    def get_run(self, run_id: str, owner: str = LOCAL) -> Run:
        """`owner`'s run with this id; another owner's run is refused as unknown."""
        run_id = (run_id or "").strip()
        run = self._runs.get(run_id)
        if run is None and self._store is not None:
            run = self._store.load(run_id)
        if not _owned(run, owner):
            raise ValueError(f"no stored run with id {run_id!r} (the app keeps the last {KEPT_RUNS} runs)")
        return run

    def runs(self, owner: str = LOCAL) -> list[Run]:
        """`owner`'s stored runs, oldest first (the teaching and calibration tabs read them)."""
        kept = list(self._runs.values())
        if self._store is not None:
            on_disk = [i for i in self._store.ids() if i not in self._runs]
            kept = ([run for run in map(self._store.load, on_disk) if run is not None] + kept)[-KEPT_RUNS:]
        return [run for run in kept if _owned(run, owner)]

    def export(self, run_id: str, owner: str = LOCAL) -> list[str]:
        """`owner`'s run's round records (AR baseline included) as CSV and Parquet files named after
        the run and its drafter (the schema: docs/REFERENCE.md, "Exported round records")."""
        run = self.get_run(run_id, owner)
        frame = run.frame()
        stem = os.path.join(self.session.downloads.folder(), f"libraspec-{run.run_id}-{run.drafter}")
        return [write_csv(frame, stem + ".csv"), write_parquet(frame, stem + ".parquet")]


def _owned(run: Run | None, owner: str) -> bool:
    """Whether `run` is `owner`'s; a run stored by an older version, without an owner, is nobody's."""
    return run is not None and getattr(run, "owner", None) == owner
