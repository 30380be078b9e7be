"""The app's races: the AR baseline cache, the live race (`Races.stream`) and the runs each
visitor keeps (in memory, and on disk on a ZeroGPU Space).

A race is a `run.Run`; its words (verdict, progress, notes, round narratives) are `race_words`'.
Every model call goes through the `Session` (`session.exclusive`), one at a time.

Per-user state: each race records its owner (the tabs pass the gradio session of the page or
API client), and only that owner lists, inspects or exports it. Runs made outside the app
(scripts, tests) belong to `LOCAL`.
"""

from __future__ import annotations

import functools
import os
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import Iterator

from libraspec.device import on_zero_gpu
from libraspec.engine import DecodeConfig, race, remodel_ar
from libraspec.modes import AR, MODES, PAPER
from libraspec.paths import cache_root
from libraspec.profiling import PROFILE_TOLERANCE, profile_check
from libraspec.records import (
    RoundRecord,
    committed_text,
    write_csv,
    write_parquet,
)
from libraspec.spec import Checked, RunSpec

from .race_words import alpha_advice, drift, kept_profile, load_change_note, race_progress, remeasured
from .render import TextSegments, eta_text
from .run import LOCAL, Run
from .run_store import RunStore
from .settings import APP_CAPS, check_prompt_length, check_race_modes, suggest_alpha

UPDATE_INTERVAL_S = 0.25  # the race view refreshes at most 4 times a second
KEPT_RUNS = 8


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
        """Encode the prompt and check the settings once: `RunSpec.checked` under the app's caps
        (clamps, each noted by field); everything below trusts the checked spec."""
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError("the prompt is empty: type a question or instruction")
        pair = self.session.pair
        ids = pair.encode_prompt(prompt)
        check_prompt_length(len(ids), pair.target.device.type)
        return ids, settings.checked(pair.n, pair.max_context, len(ids), APP_CAPS)

    def _ar_baseline(self, ids: list[int], prompt: str, settings: RunSpec) -> Iterator[tuple[int, list]]:
        """AR decoding of the same prompt and settings, cached once it finished; yields (tokens so
        far, records), then (-1, records). A baseline another run took the model from ends unfinished
        and is not kept."""
        key = (self.session.pair.name, prompt, settings.max_new_tokens, settings.temperature, settings.seed)
        if key in self._ar_cache:
            self._ar_cache.move_to_end(key)
            yield -1, self._ar_cache[key]
            return
        config = DecodeConfig.of(settings)
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
        config = DecodeConfig.of(
            settings,
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
