"""The app's model session: the one model pair, loaded lazily, its decoders (one per drafter),
its latency profile, and the lock under which every model call runs; with two parts that use
them, `races` (`races.Races`: the live race, the AR baseline cache, each visitor's runs) and
`sweeps` (`sweeps.Sweeps`: sweeps and calibration runs).

Drafters: the pair loads once; each drafter (`libraspec.drafters.DRAFTERS`) gets its own
`SpeculativeDecoder` over it, made on first use (`decoder_for`, through
`drafter_with_fallback`, whose note a run then carries) and sharing the pair's profile.

No gradio here: the tabs turn `ValueError`s into `gr.Error`s. Every model call of the app
goes through this class (the tabs never hold the decoder or the models); the decoding itself
is `libraspec`'s (`SpeculativeDecoder.run`, `race`, `iter_sweep`).

Concurrency: the tabs run every model call in one gradio queue of size 1; the model lock
also guards each decoding step and each profile measurement, so a cancelled run's generator
(left unfinished by gradio) is closed by the next run before that run touches the models.

Per-user state: the session is shared by every visitor, so what belongs to one is keyed by
an `owner` (the gradio session of the page or API client): races and their runs
(`races.Races`), a sweep's cancel event (`sweeps.Sweeps`).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Iterator

import torch

from libraspec.cost import LatencyProfile
from libraspec.device import free_memory
from libraspec.drafters import DRAFTERS, drafter_with_fallback
from libraspec.engine import SpeculativeDecoder
from libraspec.models.registry import check_pair_name, load_pair, offered_pairs
from libraspec.profiling import Progress, ar_check_now, cached_profile, profile_reaching

from .downloads import Downloads
from .races import Races
from .sweeps import Sweeps

HEARTBEAT_S = 2.0  # seconds between the loading status lines while the latency profile is measured


class Session:
    """Holds the one model pair and its decoders and makes every call to them; one run at a time."""

    def __init__(
        self, model: str | None = None, offered: list[str] | None = None, runs_dir: str | os.PathLike | None = None
    ):
        """`runs_dir`: where finished races are also written (`races.Races`)."""
        self.offered = list(offered or ([check_pair_name(model)] if model else offered_pairs()))
        self.model = model or self.offered[0]
        self.pair = None
        self.decoder: SpeculativeDecoder | None = None
        self._load_lock = threading.Lock()
        self._model_lock = threading.Lock()
        self._active: Iterator | None = None
        self._decoders: dict[str, tuple[SpeculativeDecoder, str | None]] = {}  # drafter -> (decoder, note)
        self.load_seconds: dict[str, float] = {}  # loading step -> seconds, of the last load
        self._profiled = False
        self.downloads = Downloads()  # trace exports and sweep CSVs
        self.races = Races(self, runs_dir)
        self.sweeps = Sweeps(self)

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
            yield f"Loading {self.model} (first use only)…"
            self.load_models()
        start, progress = time.perf_counter(), Progress()
        done, failed = threading.Event(), []

        def measure() -> None:  # measured (or read from the disk cache) now, not during a race
            try:
                self._measure_profile(progress)
            except BaseException as error:  # handed to the loading thread below
                failed.append(error)
            finally:
                done.set()

        threading.Thread(target=measure, name="latency-profile", daemon=True).start()
        wait = 0.0  # the first line at once, then one every HEARTBEAT_S while the measurement runs
        while not done.wait(wait):
            yield f"Measuring the latency profile of {self.model} (first use only): {progress.line()}…"
            wait = HEARTBEAT_S
        if failed:
            raise failed[0]
        self.load_seconds["latency profile"] = time.perf_counter() - start
        self._profiled = True

    def _measure_profile(self, progress: Progress) -> None:
        """The decoder's latency profile, from the disk cache or measured with `progress` (under the model lock)."""
        decoder = self.decoder
        with self._model_lock:
            if decoder.measured_profile is None:
                decoder.profile = cached_profile(self.pair, progress=progress)

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
                made = self._new_decoder(pair, pair.default_drafter)
                self.pair, self.decoder = pair, made[0]
                self._decoders = {pair.default_drafter: made}
                self.load_seconds = {"models": time.perf_counter() - start}

    def select(self, name: str | None) -> None:
        """Switch to another offered pair ("" or None keeps the current one); the old one is freed."""
        if not name or name == self.model:
            return
        if name not in self.offered:
            raise ValueError(f"model pair {name!r} is not offered here; choose one of {', '.join(self.offered)}")
        self.stop_active()
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
                self._decoders[name] = self._new_decoder(pair, name, profile)
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

    def ar_step_check(self) -> dict:
        """`ar_check` of the profile's AR step timed now (`ar_step_now`, 15 forwards: about a second on a
        CPU) against the profile, under the model lock: what a race's drift check confirms before it
        spends minutes re-measuring the profile (a short baseline's own noise is no change of load)."""
        with self._model_lock:
            return ar_check_now(self.pair, self.decoder.profile)

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
            self.races.remodel_baselines(new)
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

    def profile_reaching(self, longest: int) -> LatencyProfile:
        """A latency profile that verifies up to d_max = `longest` drafts: the session's own when its
        verification table reaches that far (no second measurement: a sweep after a race used to
        measure for 105 s; passes beyond the measured ones are priced by the profile's linear
        continuation, each pass being the same forward), else one measured once per machine and
        pair and read from the disk cache."""
        pair = self.pair
        self.stop_active()
        own = self.profile()
        with self._model_lock:
            if own is not None and len(own.verify_s) >= longest + 1:
                return own
            return profile_reaching(pair, longest)

    def new_decoder(self, drafter: str, profile: LatencyProfile) -> tuple[SpeculativeDecoder, str | None]:
        """A decoder of the loaded pair drafting with `drafter`, priced by `profile`, not kept (a sweep's)."""
        return self._new_decoder(self.pair, drafter, profile)

    @staticmethod
    def _new_decoder(
        pair, drafter: str, profile: LatencyProfile | None = None
    ) -> tuple[SpeculativeDecoder, str | None]:
        """A decoder drafting with `drafter`, or with dflash and `drafter_with_fallback`'s note when it
        could not be made (None otherwise)."""
        made, note = drafter_with_fallback(drafter, pair)
        return SpeculativeDecoder(pair, profile, drafter=made), note

    # -- the run lock ---------------------------------------------------------------------------

    def _step(self, iterator: Iterator):
        """Advance the active iterator by one step under the lock; None when exhausted or superseded."""
        with self._model_lock:
            if self._active is not iterator:
                return None
            return next(iterator, None)

    def exclusive(self, iterator: Iterator) -> Iterator:
        """Items of `iterator`, each produced under the model lock as the active run (a race, a
        sweep, a what-if's trace or profile measurement): the next run supersedes it."""
        self._activate(iterator)
        while (item := self._step(iterator)) is not None:
            yield item

    def stop_active(self) -> None:
        """Close the active run now (after any step in flight)."""
        self._activate(None)

    def _activate(self, iterator: Iterator | None) -> None:
        """Make `iterator` (None: no run) the active run, after any step in flight; the previous
        one, a cancelled run left unfinished, is closed so that two runs never interleave."""
        with self._model_lock:
            if self._active is not None:
                self._active.close()  # a cancelled run left unfinished
            self._active = iterator
