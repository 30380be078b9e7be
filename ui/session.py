"""The app's model session: lazy loading, input checks, the AR baseline cache, the live race,
sweeps, calibration runs and the latency profile.

No gradio here: the tabs turn `ValueError`s into `gr.Error`s. Every model call of the app
goes through this class (the tabs never hold the decoder or the models); the decoding itself
is `libraspec`'s (`SpeculativeDecoder.run`, `race`, `iter_sweep`). Paper symbols: alpha
(LibraSpec trade-off), n (block size), d, d_max (length cap), tau.

Concurrency: the tabs run every model call in one gradio queue of size 1; the model lock
also guards each decoding step and each profile measurement, so a cancelled run's generator
(left unfinished by gradio) is closed by the next run before that run touches the models.

Per-user state: the session is shared by every visitor, so what belongs to one is keyed by
an `owner` (the tabs pass the gradio session of the page or API client): each race records
its owner, and only that owner lists, inspects or exports it; a sweep's cancel event is the
owner's. Runs made outside the app (scripts, tests) belong to `LOCAL`.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import os
import tempfile
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Iterator

import pandas as pd

from libraspec.cost import LatencyProfile
from libraspec.engine import DecodeConfig, SpeculativeDecoder, race
from libraspec.device import free_memory, on_zero_gpu
from libraspec.models.registry import check_pair_name, load_pair, offered_pairs
from libraspec.modes import MODES, PolicySettings
from libraspec.policy import StaticPolicy
from libraspec.profiling import cache_root, cached_profile
from libraspec.records import RoundRecord, RunSummary, records_to_frame, summarize, write_csv, write_parquet
from libraspec.experiments.sweep import SweepEvent, iter_sweep, parse_alphas, parse_d_maxes

from .render import TextSegments
from .run_store import RunStore
from .settings import D_MAX_CAP, MAX_NEW_TOKENS_CAP, Settings, check_settings, integer_setting

RACE_MODES = ("static", "libraspec", "oracle")
UPDATE_INTERVAL_S = 0.25  # the race view refreshes at most 4 times a second
KEPT_RUNS = 8
LOCAL = "local"  # the owner of runs made outside the app


@dataclass
class Run:
    """One race: its records per mode, the AR baseline, texts and summaries."""

    run_id: str
    prompt: str
    settings: Settings
    notes: list[str]
    ar_records: list[RoundRecord]
    model: str  # the pair's name
    n: int  # the pair's drafts per step
    owner: str  # who may list, inspect and export it (see the module docstring)
    records: dict[str, list[RoundRecord]] = field(default_factory=dict)
    segments: dict[str, TextSegments] = field(default_factory=dict)
    finish_order: list[str] = field(default_factory=list)
    finished: bool = False

    def summary(self, mode: str) -> RunSummary | None:
        records = self.records.get(mode)
        return summarize(records, self.ar_records) if records else None

    def rank(self, mode: str) -> int | None:
        """Place among the finished modes by final measured time (not by event order: the race
        picks the next mode by its clock before a round, so a last round can overtake)."""
        if mode not in self.finish_order:
            return None
        finished = sorted(self.finish_order, key=lambda m: self.records[m][-1].cumulative_s)
        return finished.index(mode) + 1

    def last_drafted_round(self, mode: str) -> int:
        """Index of the mode's last round that submitted drafts (d >= 1); 0 if none."""
        rounds = [r.round_index for r in self.records.get(mode, []) if r.chosen_length > 0]
        return rounds[-1] if rounds else 0

    def frame(self, with_ar: bool = True) -> pd.DataFrame:
        records = list(self.ar_records) if with_ar else []
        for mode in RACE_MODES:
            records += self.records.get(mode, [])
        return records_to_frame(records)

    def ar_per_token(self) -> tuple[float | None, float | None]:
        """AR measured and modeled seconds per token (the speedup denominators' numerators)."""
        if not self.ar_records:
            return None, None
        ar = summarize(self.ar_records)
        return ar.seconds / ar.tokens, ar.modeled_seconds / ar.tokens

    def text(self, mode: str) -> str:
        segments = self.segments.get(mode)
        return segments.text if segments is not None else ""

    def report(self) -> dict:
        """JSON-ready summary: settings, notes, and per-mode totals (non-finite numbers -> None)."""
        def clean(summary: RunSummary | None) -> dict | None:
            if summary is None:
                return None
            return {k: (v if not isinstance(v, float) or math.isfinite(v) else None)
                    for k, v in dataclasses.asdict(summary).items()}
        modes = {}
        for mode in RACE_MODES:
            entry = clean(self.summary(mode)) or {}
            entry["finish_rank"] = self.rank(mode)
            modes[mode] = entry
        ar = clean(summarize(self.ar_records)) if self.ar_records else None
        return {"run_id": self.run_id, "model": self.model, "n": self.n,
                "settings": dataclasses.asdict(self.settings), "notes": list(self.notes),
                "finished": self.finished, "modes": modes, "ar": ar}


@dataclass(frozen=True)
class Snapshot:
    """What the race view shows at one moment of a run."""

    status: str
    run: Run | None
    final: bool = False
    phase: str = "race"  # "load" | "baseline" | "race"


class Session:
    """Holds the one model pair and decoder of the app and makes every call to them; one run at a time."""

    def __init__(self, model: str | None = None, offered: list[str] | None = None,
                 runs_dir: str | os.PathLike | None = None):
        """`runs_dir`: where finished runs are also written (default: on a ZeroGPU Space, whose GPU
        calls run in forked workers, the cache folder's `runs/`; elsewhere memory only)."""
        self.offered = list(offered or ([check_pair_name(model)] if model else offered_pairs()))
        self.model = model or self.offered[0]
        self.pair = None
        self.decoder: SpeculativeDecoder | None = None
        self._load_lock = threading.Lock()
        self._model_lock = threading.Lock()
        self._active: Iterator | None = None
        self._cancels: dict[str, threading.Event] = {}  # owner -> the cancel event of its running sweep
        self._ar_cache: OrderedDict[tuple, list[RoundRecord]] = OrderedDict()
        self._runs: OrderedDict[str, Run] = OrderedDict()
        if runs_dir is None and on_zero_gpu():
            runs_dir = os.path.join(cache_root(), "runs")
        self._store = RunStore(runs_dir, KEPT_RUNS) if runs_dir is not None else None

    # -- models -------------------------------------------------------------------------------

    @property
    def loaded(self) -> bool:
        return self.decoder is not None

    def load(self) -> Iterator[str]:
        """Load the pair and measure its latency profile once; yields a status line first.

        No lock is held across a yield, so a client that goes away mid-load blocks nobody.
        """
        if self.decoder is not None:
            return
        yield f"Loading {self.model} and measuring its latency profile (first use only)…"
        self.load_models()
        self.profile()  # measured (or read from the disk cache) now, not during a race

    def load_models(self) -> None:
        """Load the selected pair without profiling it (a ZeroGPU Space does this at start-up)."""
        with self._load_lock:
            if self.decoder is None:
                pair = load_pair(self.model)
                self.pair, self.decoder = pair, SpeculativeDecoder(pair)

    def select(self, name: str | None) -> None:
        """Switch to another offered pair ("" or None keeps the current one); the old one is freed."""
        if not name or name == self.model:
            return
        if name not in self.offered:
            raise ValueError(f"model pair {name!r} is not offered here; choose one of {', '.join(self.offered)}")
        self._activate(None)
        with self._load_lock:
            self.pair = self.decoder = None
            self.model = name
        free_memory()

    @property
    def n(self) -> int | None:
        """n of the loaded pair (None before loading)."""
        pair = self.pair
        return pair.n if pair is not None else None

    def profile(self) -> LatencyProfile | None:
        """The loaded pair's latency profile (None before loading); measured once, under the model lock."""
        decoder = self.decoder
        if decoder is None:
            return None
        with self._model_lock:
            return decoder.profile

    def describe(self) -> str:
        if self.pair is None:
            return "model not loaded yet"
        return f"{self.pair.description} · n = {self.pair.n} · context {self.pair.max_context}"

    # -- runs ---------------------------------------------------------------------------------

    def prepare(self, prompt: str, settings: Settings) -> tuple[list[int], Settings, list[str]]:
        """Encode the prompt and check the settings; clamps that change a value are noted."""
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError("the prompt is empty: type a question or instruction")
        ids = self.pair.encode_prompt(prompt)
        checked = check_settings(settings, self.pair.n)
        notes = []
        room = self.pair.max_context - len(ids) - checked.d_max - 1
        if room < 1:
            raise ValueError(f"the prompt is {len(ids)} tokens long; with d_max = {checked.d_max} it leaves "
                             f"no room in the {self.pair.max_context}-token context window")
        if checked.max_new_tokens > room:
            notes.append(f"max new tokens clamped from {checked.max_new_tokens} to {room} so that prompt + "
                         f"output + look-ahead fit the {self.pair.max_context}-token context window")
            checked = dataclasses.replace(checked, max_new_tokens=room)
        return ids, checked, notes

    def _step(self, iterator: Iterator):
        """Advance the active iterator by one step under the lock; None when exhausted or superseded."""
        with self._model_lock:
            if self._active is not iterator:
                return None
            return next(iterator, None)

    def _steps(self, iterator: Iterator) -> Iterator:
        """Make `iterator` the active run and yield its items, each produced under the model lock."""
        self._activate(iterator)
        while (item := self._step(iterator)) is not None:
            yield item

    def _activate(self, iterator: Iterator | None) -> None:
        """Make `iterator` (None: no run) the active run, after any step in flight; the previous
        one, a cancelled run left unfinished, is closed so that two runs never interleave."""
        with self._model_lock:
            if self._active is not None:
                self._active.close()  # a cancelled run left unfinished
            self._active = iterator

    def _ar_baseline(self, ids: list[int], prompt: str, settings: Settings) -> Iterator[tuple[int, list]]:
        """AR decoding of the same prompt and settings, cached; yields (tokens so far, records)."""
        key = (self.pair.name, prompt, settings.max_new_tokens, settings.temperature, settings.seed)
        if key in self._ar_cache:
            self._ar_cache.move_to_end(key)
            yield -1, self._ar_cache[key]
            return
        config = DecodeConfig(max_new_tokens=settings.max_new_tokens, temperature=settings.temperature,
                              seed=settings.seed)
        iterator = self.decoder.run(ids, "ar", None, config)
        records = []
        for record in self._steps(iterator):
            records.append(record)
            yield record.cumulative_tokens, records
        self._ar_cache[key] = records
        while len(self._ar_cache) > KEPT_RUNS * 4:
            self._ar_cache.popitem(last=False)
        yield -1, records

    def stream(self, prompt: str, settings: Settings, owner: str = LOCAL) -> Iterator[Snapshot]:
        """Race static, LibraSpec and oracle on one prompt for `owner`; snapshots at most every 0.25 s."""
        for line in self.load():
            yield Snapshot(line, None, phase="load")
        ids, settings, notes = self.prepare(prompt, settings)
        ar_records: list[RoundRecord] = []
        last = 0.0
        for done, ar_records in self._ar_baseline(ids, prompt, settings):
            if done >= 0 and time.monotonic() - last >= UPDATE_INTERVAL_S:
                last = time.monotonic()
                yield Snapshot(f"Measuring the autoregressive baseline: {done}/{settings.max_new_tokens} "
                               "tokens (once per prompt and settings)…", None, phase="baseline")
        run = Run(uuid.uuid4().hex[:12], prompt, settings, notes, ar_records, self.pair.name, self.pair.n,
                  owner)
        for mode in RACE_MODES:
            # the tokenizer's decode, not the pair's: a stored run must not keep a switched-out pair's
            # weights alive (a GPU holds one pair at a time)
            run.segments[mode] = TextSegments(functools.partial(self.pair.tokenizer.decode,
                                                                skip_special_tokens=True))
        self._keep(run)
        knobs = PolicySettings(alpha=settings.alpha, d_max=settings.d_max, static_length=settings.static_length)
        entries = {mode: (mode, MODES[mode].policy(knobs)) for mode in RACE_MODES}
        config = DecodeConfig(max_new_tokens=settings.max_new_tokens, temperature=settings.temperature,
                              seed=settings.seed, lookahead=settings.d_max, annotate_oracle=True)
        iterator = race(self.decoder, ids, entries, config)
        last = 0.0
        for mode, record in self._steps(iterator):
            run.records.setdefault(mode, []).append(record)
            run.segments[mode].add(record)
            if record.finished:
                run.finish_order.append(mode)
            if record.finished or time.monotonic() - last >= UPDATE_INTERVAL_S:
                last = time.monotonic()
                yield Snapshot("Racing…", run)
        run.finished = len(run.finish_order) == len(RACE_MODES)
        if self._store is not None:
            self._store.save(run)
        yield Snapshot("Finished." if run.finished else "Stopped.", run, final=True)

    # -- sweeps and calibration runs ----------------------------------------------------------

    def sweep(self, prompts: list[str], alphas, d_maxes, max_new_tokens,
              owner: str = LOCAL) -> Iterator[tuple[str, SweepEvent | None]]:
        """LibraSpec over an alpha x d_max grid on `prompts` (`iter_sweep`: AR once per prompt, the
        oracle annotation in every cell); yields (status line, event or None). `cancel_sweep(owner)`
        stops it before its next run."""
        grid_alphas, grid_d = parse_alphas(alphas), parse_d_maxes(d_maxes)
        config = DecodeConfig(max_new_tokens=integer_setting(max_new_tokens, "max new tokens", 1, MAX_NEW_TOKENS_CAP))
        cancel = self._cancels[owner] = threading.Event()
        try:
            for line in self.load():
                yield line, None
            pair = self.pair
            if max(grid_d) > pair.max_context // 2:
                raise ValueError(f"d_max values must stay within half the {pair.max_context}-token context window")
            ids = [pair.encode_prompt(p) for p in prompts]
            yield f"Measuring the latency profile up to d_max = {max(grid_d)} (once per machine and pair)…", None
            iterator = iter_sweep(self._sweep_decoder(max(grid_d)), ids, grid_alphas, grid_d, config, cancel)
            for event in self._steps(iterator):
                state = "Cancelled" if event.cancelled else "Finished" if event.done == event.total else "Running"
                yield f"{state}: {event.done}/{event.total} runs ({event.label}) on {pair.name}.", event
        finally:
            if self._cancels.get(owner) is cancel:
                del self._cancels[owner]

    def cancel_sweep(self, owner: str) -> bool:
        """Stop `owner`'s running sweep before its next run (no other owner's); False when none runs."""
        cancel = self._cancels.get(owner)
        if cancel is not None:
            cancel.set()
        return cancel is not None

    def _sweep_decoder(self, longest: int) -> SpeculativeDecoder:
        """A decoder whose latency profile reaches d_max = `longest` (measured once per machine and
        pair, then read from the disk cache)."""
        pair = self.pair
        self._activate(None)
        with self._model_lock:
            profile = cached_profile(pair, max_tokens=max(25, longest + 1),
                                     max_blocks=max(2, -(-longest // pair.n)))
        return SpeculativeDecoder(pair, profile)

    def static_run(self, prompts: list[str], d, max_new_tokens) -> Iterator[tuple[str, list[RoundRecord] | None]]:
        """Decode each prompt with the static length d (prompt k with seed k), so that every drafted
        position up to d is submitted and judged; yields (status line, None) while loading, then
        (status line, the records so far) after each prompt."""
        d = integer_setting(d, "d_max", 1, D_MAX_CAP)
        max_new = integer_setting(max_new_tokens, "max new tokens", 1, MAX_NEW_TOKENS_CAP)
        for line in self.load():
            yield line, None
        records: list[RoundRecord] = []
        for k, prompt in enumerate(prompts):
            config = DecodeConfig(max_new_tokens=max_new, seed=k, lookahead=d)
            iterator = self.decoder.run(self.pair.encode_prompt(prompt), "static", StaticPolicy(d), config)
            records += self._steps(iterator)
            yield f"Fresh run: prompt {k + 1}/{len(prompts)} decoded…", records

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
        """`owner`'s run's round records (AR baseline included) as CSV and Parquet files."""
        run = self.get_run(run_id, owner)
        folder = tempfile.mkdtemp(prefix="libraspec-trace-")
        frame = run.frame()
        stem = os.path.join(folder, f"libraspec-{run.run_id}")
        return [write_csv(frame, stem + ".csv"), write_parquet(frame, stem + ".parquet")]


def _owned(run: Run | None, owner: str) -> bool:
    """Whether `run` is `owner`'s; a run stored by an older version, without an owner, is nobody's."""
    return run is not None and getattr(run, "owner", None) == owner
