"""The app's model session: lazy loading, input checks, the AR baseline cache, the live race,
sweeps, calibration runs and the latency profile.

Drafters: the pair loads once; each drafter (`libraspec.drafters.DRAFTERS`) gets its own
`SpeculativeDecoder` over it, made on first use (`decoder_for`, through
`drafter_with_fallback`, whose note a run then carries) and sharing the pair's profile.

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
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Iterator

import pandas as pd
import torch

from libraspec.cost import LatencyProfile
from libraspec.device import free_memory, on_zero_gpu
from libraspec.drafters import DRAFTERS, drafter_with_fallback
from libraspec.engine import DecodeConfig, SpeculativeDecoder, race, remodel_ar
from libraspec.experiments.driver import RunDone, decode_grid, mode_job
from libraspec.experiments.sweep import SweepEvent, iter_sweep, parse_alphas, parse_d_maxes
from libraspec.models.registry import check_pair_name, load_pair, offered_pairs
from libraspec.modes import MODES
from libraspec.profiling import PROFILE_TOLERANCE, cache_root, cached_profile, profile_check, within
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

from .downloads import Downloads
from .render import TextSegments, duration, eta_text, title
from .run_store import RunStore
from .settings import (
    D_MAX_CAP,
    DEFAULT_RACE_MODES,
    MAX_NEW_TOKENS_CAP,
    check_prompt_length,
    check_race_modes,
    check_settings,
    integer_setting,
    suggest_alpha,
)

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

    def within_noise(self, a: str, b: str) -> bool:
        """Whether modes a and b finished closer than NOISE_Z standard deviations of their noise."""
        spread = math.hypot(self.noise_s(a), self.noise_s(b))
        return abs(self.seconds(a) - self.seconds(b)) <= NOISE_Z * spread

    def _finished(self) -> list[str]:
        """The finished modes, fastest measured total first."""
        return sorted(self.finish_order, key=self.seconds)

    def rank(self, mode: str) -> int | None:
        """Place among the finished modes by final measured time (not by event order: the race
        picks the next mode by its clock before a round, so a last round can overtake)."""
        finished = self._finished()
        return finished.index(mode) + 1 if mode in finished else None

    def tied_with(self, mode: str) -> list[str]:
        """The other finished modes whose measured total is within noise of this one's."""
        if mode not in self.finish_order:
            return []
        return [m for m in self._finished() if m != mode and self.within_noise(mode, m)]

    def verdict(self) -> str | None:
        """Who was fastest, or that no mode was faster beyond noise; None before two modes finish."""
        finished = self._finished()
        if len(finished) < 2:
            return None
        first, second = finished[:2]
        noise = NOISE_Z * math.hypot(self.noise_s(first), self.noise_s(second))
        gap = self.seconds(second) - self.seconds(first)
        if gap > noise:
            return (
                f"{title(first)} was fastest: {duration(self.seconds(first))} vs "
                f"{duration(self.seconds(second))} for {title(second)}, a gap beyond the timing "
                f"noise of ±{duration(noise)}."
            )
        tied = [first] + self.tied_with(first)
        return (
            f"No clear winner: {', '.join(title(m) for m in tied)} finished within the timing noise "
            f"of each other ({', '.join(duration(self.seconds(m)) for m in tied)}; noise ±{duration(noise)})."
        )

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

    def report(self) -> dict:
        """JSON-ready summary: settings, notes, the drafter, per-mode totals and finish ranks with
        the modes each is within noise of, and the verdict (non-finite numbers -> None)."""

        def clean(summary: RunSummary | None) -> dict | None:
            if summary is None:
                return None
            return {
                k: (v if not isinstance(v, float) or math.isfinite(v) else None)
                for k, v in dataclasses.asdict(summary).items()
            }

        modes = {}
        for mode in self.modes:
            entry = clean(self.summary(mode)) or {}
            entry["finish_rank"] = self.rank(mode)
            entry["within_noise_of"] = self.tied_with(mode)
            entry["noise_s"] = self.noise_s(mode) if self.records.get(mode) else None
            modes[mode] = entry
        ar = clean(summarize(self.ar_records)) if self.ar_records else None
        return {
            "run_id": self.run_id,
            "model": self.model,
            "n": self.n,
            "drafter": self.drafter,
            "race_modes": list(self.modes),
            "settings": dataclasses.asdict(self.settings),
            "notes": list(self.notes),
            "finished": self.finished,
            "verdict": self.verdict(),
            "modes": modes,
            "ar": ar,
        }


@dataclass(frozen=True)
class Snapshot:
    """What the race view shows at one moment of a run."""

    status: str
    run: Run | None
    final: bool = False
    phase: str = "race"  # "load" | "baseline" | "race"
    progress: str = ""  # tokens per mode so far and the time left, while decoding
    checked: Checked | None = None  # the settings the run uses and what their check changed (once, first)


class Session:
    """Holds the one model pair and decoder of the app and makes every call to them; one run at a time."""

    def __init__(
        self, model: str | None = None, offered: list[str] | None = None, runs_dir: str | os.PathLike | None = None
    ):
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
        self._decoders: dict[str, tuple[SpeculativeDecoder, str | None]] = {}  # drafter -> (decoder, note)
        self.load_seconds: dict[str, float] = {}  # loading step -> seconds, of the last load
        self._profiled = False
        self._ar_cache: OrderedDict[tuple, list[RoundRecord]] = OrderedDict()
        self._runs: OrderedDict[str, Run] = OrderedDict()
        if runs_dir is None and on_zero_gpu():
            runs_dir = os.path.join(cache_root(), "runs")
        self._store = RunStore(runs_dir, KEPT_RUNS) if runs_dir is not None else None
        self.downloads = Downloads()  # trace exports and sweep CSVs

    # -- models -------------------------------------------------------------------------------

    @property
    def loaded(self) -> bool:
        return self.decoder is not None

    def load(self) -> Iterator[str]:
        """Load the pair and measure its latency profile once; yields a status line first.

        No lock is held across a yield, so a client that goes away mid-load blocks nobody.
        `load_seconds` then says how long each step took.
        """
        if self.ready:
            return
        if self.decoder is None:
            yield f"Loading {self.model} and measuring its latency profile (first use only)…"
            self.load_models()
        else:
            yield f"Measuring the latency profile of {self.model} (first use only)…"
        start = time.perf_counter()
        self.profile()  # measured (or read from the disk cache) now, not during a race
        self.load_seconds["latency profile"] = time.perf_counter() - start
        self._profiled = True

    @property
    def ready(self) -> bool:
        """Whether the pair is loaded and its latency profile known (a race can start at once)."""
        return self.decoder is not None and self._profiled

    def load_models(self) -> None:
        """Load the selected pair without profiling it (a ZeroGPU Space does this at start-up)."""
        with self._load_lock:
            if self.decoder is None:
                start = time.perf_counter()
                pair = load_pair(self.model)
                made = _decoder(pair, pair.default_drafter)
                self.pair, self.decoder = pair, made[0]
                self._decoders = {pair.default_drafter: made}
                self.load_seconds = {"models": time.perf_counter() - start}

    def select(self, name: str | None) -> None:
        """Switch to another offered pair ("" or None keeps the current one); the old one is freed."""
        if not name or name == self.model:
            return
        if name not in self.offered:
            raise ValueError(f"model pair {name!r} is not offered here; choose one of {', '.join(self.offered)}")
        self._activate(None)
        with self._load_lock:
            self.pair = self.decoder = None
            self._decoders, self._profiled = {}, False
            self.model = name
        free_memory()

    def decoder_for(self, drafter: str | None) -> tuple[SpeculativeDecoder, str | None]:
        """The loaded pair's decoder that drafts with `drafter` ("" or None: the pair's default), made
        on first use and kept, sharing the pair's latency profile. The second value is a note when
        the drafter could not be made and the block-diffusion drafter stands in (`drafter_with_fallback`)."""
        pair = self.pair
        name = drafter or pair.default_drafter
        if name not in DRAFTERS:
            raise ValueError(f"unknown drafter {name!r}; choose one of {', '.join(DRAFTERS)}")
        profile = self.profile()
        with self._load_lock:
            if name not in self._decoders:
                self._decoders[name] = _decoder(pair, name, profile)
            return self._decoders[name]

    @property
    def n(self) -> int | None:
        """n of the loaded pair (None before loading)."""
        pair = self.pair
        return pair.n if pair is not None else None

    @property
    def default_drafter(self) -> str | None:
        """The loaded pair's default drafter (None before loading)."""
        pair = self.pair
        return pair.default_drafter if pair is not None else None

    def profile(self) -> LatencyProfile | None:
        """The loaded pair's latency profile (None before loading); measured once, under the model lock."""
        decoder = self.decoder
        if decoder is None:
            return None
        with self._model_lock:
            return decoder.profile

    def profile_now(self) -> LatencyProfile | None:
        """The loaded pair's profile if it is measured already, without waiting for the model lock
        (a view that must answer in milliseconds while another visitor's run holds the model)."""
        decoder = self.decoder
        return None if decoder is None else decoder.measured_profile

    def remeasure_profile(self) -> tuple[LatencyProfile, LatencyProfile]:
        """Measure the loaded pair's latency profile again over the same ranges, replace its disk
        file and hand it to every decoder; cached AR baselines are re-modeled with it. A run under
        way keeps the profile it started with. Returns (old, new)."""
        if not self.ready:
            raise ValueError("the model is not loaded yet: wait until the status says Ready")
        with self._model_lock:
            old = self.decoder.profile
            new = cached_profile(self.pair, max_tokens=len(old.verify_s), max_blocks=len(old.draft_s), refresh=True)
            for decoder in {id(d): d for d in [self.decoder, *(d for d, _ in self._decoders.values())]}.values():
                decoder.profile = new
            for key, records in self._ar_cache.items():
                self._ar_cache[key] = remodel_ar(records, new)
        return old, new

    def token_text(self, model: str):
        """A function from a token id to its text, with the loaded pair's tokenizer when `model` is the
        loaded pair (a run of a pair switched out since gets the ids as text)."""
        pair = self.pair
        if pair is None or pair.name != model:
            return str
        decode = pair.tokenizer.decode
        return lambda token: decode([int(token)])

    def describe(self) -> str:
        """The pair and where it runs: n, context window, device, dtype and, on a CPU, torch's threads."""
        if self.pair is None:
            return "model not loaded yet"
        target = self.pair.target
        where = f"{target.device.type.upper()} · {str(target.dtype).removeprefix('torch.')}"
        if target.device.type == "cpu":
            threads = torch.get_num_threads()
            where += f" · {threads} thread{'s' if threads != 1 else ''}"
        return f"{self.pair.description} · n = {self.pair.n} · context {self.pair.max_context} · {where}"

    def suggested_alpha(self, owner: str = LOCAL) -> tuple[float, str]:
        """Section 3.4's alpha = T_verify / (tau c) from this machine's latency profile and the mean tau
        and d of `owner`'s last race's LibraSpec rounds: (alpha, how it was computed)."""
        profile = self.profile()
        if profile is None:
            raise ValueError("the model is not loaded yet: wait until the status says Ready")
        runs = [run for run in self.runs(owner) if run.records.get("libraspec")]
        if not runs:
            raise ValueError(
                "no race yet: the suggestion needs the mean tau and d of your LibraSpec rounds, so run one race first"
            )
        suggestion = suggest_alpha(runs[-1].records["libraspec"], profile)
        return suggestion.alpha, f"{suggestion.explain()} of your last race"

    # -- runs ---------------------------------------------------------------------------------

    def prepare(self, prompt: str, settings: RunSpec) -> tuple[list[int], Checked]:
        """Encode the prompt and check the settings (`check_settings`: clamps, each noted by field)."""
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError("the prompt is empty: type a question or instruction")
        ids = self.pair.encode_prompt(prompt)
        check_prompt_length(len(ids), self.pair.target.device.type)
        return ids, check_settings(settings, self.pair.n, self.pair.max_context, len(ids))

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

    def exclusive(self, iterator: Iterator) -> Iterator:
        """Items of `iterator`, each produced under the model lock as the active run (a what-if's
        trace or profile measurement): a new race or sweep supersedes it, as it supersedes a race."""
        yield from self._steps(iterator)

    def _activate(self, iterator: Iterator | None) -> None:
        """Make `iterator` (None: no run) the active run, after any step in flight; the previous
        one, a cancelled run left unfinished, is closed so that two runs never interleave."""
        with self._model_lock:
            if self._active is not None:
                self._active.close()  # a cancelled run left unfinished
            self._active = iterator

    def _ar_baseline(self, ids: list[int], prompt: str, settings: RunSpec) -> Iterator[tuple[int, list]]:
        """AR decoding of the same prompt and settings, cached once it finished; yields (tokens so
        far, records), then (-1, records). A baseline another run took the model from ends unfinished
        and is not kept."""
        key = (self.pair.name, prompt, settings.max_new_tokens, settings.temperature, settings.seed)
        if key in self._ar_cache:
            self._ar_cache.move_to_end(key)
            yield -1, self._ar_cache[key]
            return
        config = DecodeConfig(
            max_new_tokens=settings.max_new_tokens, temperature=settings.temperature, seed=settings.seed
        )
        iterator = self.decoder.run(ids, "ar", None, config)
        records = []
        for record in self._steps(iterator):
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
        for line in self.load():
            yield Snapshot(line, None, phase="load")
        ids, checked = self.prepare(prompt, settings)
        settings = checked.spec
        decoder, fallback = self.decoder_for(drafter)
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
        if not check["ok"]:  # the profile was measured under another load: its modeled times would mislead
            yield Snapshot(f"Re-measuring the latency profile: {_drift(check)}…", None, phase="baseline")
            self.remeasure_profile()
            ar_records = remodel_ar(ar_records, decoder.profile)
            notes.append(_remeasured(check, profile_check(decoder.profile, ar_records, PROFILE_TOLERANCE)))
        run = Run(
            uuid.uuid4().hex[:12],
            prompt,
            settings,
            notes,
            ar_records,
            self.pair.name,
            self.pair.n,
            owner,
            decoder.drafter.name,
            modes,
        )
        for mode in modes:
            # the tokenizer's decode, not the pair's: a stored run must not keep a switched-out pair's
            # weights alive (a GPU holds one pair at a time)
            run.segments[mode] = TextSegments(functools.partial(self.pair.tokenizer.decode, skip_special_tokens=True))
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
        for mode, record in self._steps(iterator):
            run.records.setdefault(mode, []).append(record)
            run.segments[mode].add(record)
            if record.finished:
                run.finish_order.append(mode)
            if record.finished or time.monotonic() - last >= UPDATE_INTERVAL_S:
                last = time.monotonic()
                yield Snapshot("Racing…", run, progress=_race_progress(run, last - started))
        run.finished = len(run.finish_order) == len(modes)
        load_note = load_change_note(run.ar_records, [r for mode in modes for r in run.records.get(mode, [])])
        if load_note:
            run.notes.append(load_note)
        if self._store is not None:
            self._store.save(run)
        yield Snapshot("Finished." if run.finished else "Stopped.", run, final=True)

    # -- sweeps and calibration runs ----------------------------------------------------------

    def sweep(
        self, prompts: list[str], alphas, d_maxes, max_new_tokens, owner: str = LOCAL, drafter: str | None = None
    ) -> Iterator[tuple[str, SweepEvent | None]]:
        """LibraSpec over an alpha x d_max grid on `prompts` (`iter_sweep`: AR once per prompt, the grid
        replayed from draft traces with the oracle's d*, its best cells decoded for real), drafting
        with `drafter` (None or "": the pair's default);
        yields (status line, event or None), every line naming the drafter. `cancel_sweep(owner)`
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
            name = drafter or pair.default_drafter
            if name not in DRAFTERS:
                raise ValueError(f"unknown drafter {name!r}; choose one of {', '.join(DRAFTERS)}")
            yield f"Preparing the {name} drafter and a latency profile up to d_max = {max(grid_d)}…", None
            decoder, fallback = self._sweep_decoder(max(grid_d), name)
            used = decoder.drafter.name
            iterator = iter_sweep(decoder, ids, grid_alphas, grid_d, config, cancel)
            for event in self._steps(iterator):
                state = "Cancelled" if event.cancelled else "Finished" if event.finished else "Running"
                yield (
                    (
                        f"{state}: {event.done}/{event.total} runs ({event.label}) on {pair.name}, drafting with "
                        f"{used}." + (f" {fallback}" if fallback else "")
                    ),
                    event,
                )
        finally:
            if self._cancels.get(owner) is cancel:
                del self._cancels[owner]

    def cancel_sweep(self, owner: str) -> bool:
        """Stop `owner`'s running sweep before its next run (no other owner's); False when none runs."""
        cancel = self._cancels.get(owner)
        if cancel is not None:
            cancel.set()
        return cancel is not None

    def _sweep_decoder(self, longest: int, drafter: str) -> tuple[SpeculativeDecoder, str | None]:
        """A decoder drafting with `drafter` whose latency profile verifies up to d_max = `longest`
        drafts: the session's own profile when its verification table reaches that far (no second
        measurement: a sweep after a race used to measure for 105 s; passes beyond the measured ones
        are priced by the profile's linear continuation, each pass being the same forward), else
        one measured once per machine and pair and read from the disk cache; and the note of
        `drafter_with_fallback` (None when the drafter was made)."""
        pair = self.pair
        self._activate(None)
        own = self.profile()
        with self._model_lock:
            if own is not None and len(own.verify_s) >= longest + 1:
                profile = own
            else:
                profile = cached_profile(
                    pair, max_tokens=max(25, longest + 1), max_blocks=max(2, -(-longest // pair.n))
                )
        return _decoder(pair, drafter, profile)

    def static_run(
        self, prompts: list[str], d, max_new_tokens, drafter: str | None = None
    ) -> Iterator[tuple[str, list[RoundRecord] | None]]:
        """Decode each prompt with the static length d (prompt k with seed k) drafting with `drafter`
        (None or "": the pair's default), so that every drafted position up to d is submitted and
        judged; yields (status line, None) while loading, then (status line, the records so far)
        after each prompt. Each status line names the drafter (and a fallback, if one happened)."""
        d = integer_setting(d, "d_max", 1, D_MAX_CAP)
        max_new = integer_setting(max_new_tokens, "max new tokens", 1, MAX_NEW_TOKENS_CAP)
        for line in self.load():
            yield line, None
        decoder, fallback = self.decoder_for(drafter)
        used = decoder.drafter.name + (f" ({fallback})" if fallback else "")
        job = mode_job(
            "static",
            "static",
            RunSpec(static_length=d),
            lambda k: DecodeConfig(max_new_tokens=max_new, seed=k, lookahead=d),
        )
        ids = [self.pair.encode_prompt(p) for p in prompts]
        records: list[RoundRecord] = []
        for event in self._steps(decode_grid(decoder, ids, [job], rounds=True)):  # one round per lock
            if isinstance(event, RunDone):
                records += event.records
                done = (
                    f"all {len(prompts)} prompts decoded."
                    if event.done == len(prompts)
                    else f"prompt {event.done}/{len(prompts)} decoded…"
                )
                yield f"Fresh run with the {used} drafter: {done}", records

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
        stem = os.path.join(self.downloads.folder(), f"libraspec-{run.run_id}-{run.drafter}")
        return [write_csv(frame, stem + ".csv"), write_parquet(frame, stem + ".parquet")]


def _race_progress(run: Run, elapsed_s: float) -> str:
    """Tokens per mode against the AR baseline's length (the length greedy decoding reaches; an
    estimate when sampling), and the time left at the pace so far."""
    expected = sum(r.tau for r in run.ar_records) or run.settings.max_new_tokens
    done = total = 0
    parts = []
    for mode in run.modes:
        records = run.records.get(mode, [])
        tokens = records[-1].cumulative_tokens if records else 0
        finished = mode in run.finish_order
        target = tokens if finished else max(expected, tokens)
        done, total = done + tokens, total + target
        parts.append(f"{title(mode)} {tokens}/{target}{' ✓' if finished else ''}")
    return f"{' · '.join(parts)} tokens · {eta_text(done, total, elapsed_s)}"


def _drift(check: dict) -> str:
    """What `profile_check` found, in words."""
    return (
        f"the AR baseline took {1000 * check['measured_ar_s']:.1f} ms a token where the latency profile said "
        f"{1000 * check['profile_ar_s']:.1f} ms (more than ±{PROFILE_TOLERANCE:.0%} off)"
    )


def _remeasured(before: dict, after: dict) -> str:
    """The run's note after a re-measured profile (`before`, `after`: `profile_check` of each)."""
    note = (
        f"latency profile re-measured before this race: {_drift(before)}; it now says "
        f"{1000 * after['profile_ar_s']:.1f} ms"
    )
    if not after["ok"]:
        note += (
            f", still more than ±{PROFILE_TOLERANCE:.0%} off: the machine's load is changing, so the modeled "
            "speedups are uncertain"
        )
    return note


def _decoder(pair, drafter: str, profile: LatencyProfile | None = None) -> tuple[SpeculativeDecoder, str | None]:
    """A decoder drafting with `drafter`, or with dflash and `drafter_with_fallback`'s note when it
    could not be made (None otherwise)."""
    made, note = drafter_with_fallback(drafter, pair)
    return SpeculativeDecoder(pair, profile, drafter=made), note


def load_change_note(ar_records: list[RoundRecord], race_records: list[RoundRecord]) -> str | None:
    """A note when the race ran under another load than its AR baseline, None otherwise.

    Both are measured against the same latency profile, so their measured / modeled time
    ratios agree on a steady machine (within about 15% on the timing benchmark); when the race's
    is more than PROFILE_TOLERANCE away from the baseline's, the load changed between the two
    and the measured speedups compare times taken under different loads.
    """
    ar_modeled, race_modeled = sum(r.modeled_s for r in ar_records), sum(r.modeled_s for r in race_records)
    if ar_modeled <= 0 or race_modeled <= 0:
        return None
    change = (sum(r.measured_s for r in race_records) / race_modeled) / (
        sum(r.measured_s for r in ar_records) / ar_modeled
    )
    if within(change, PROFILE_TOLERANCE):
        return None
    return (
        f"the machine's load changed between the AR baseline and the race: against the latency profile the race "
        f"ran {1 / change if change < 1 else change:.1f}x {'faster' if change < 1 else 'slower'} than the "
        "baseline, so the measured speedups mislead; the modeled ones hold"
    )


def _owned(run: Run | None, owner: str) -> bool:
    """Whether `run` is `owner`'s; a run stored by an older version, without an owner, is nobody's."""
    return run is not None and getattr(run, "owner", None) == owner
