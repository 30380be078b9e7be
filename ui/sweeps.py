"""The app's sweeps and calibration runs: LibraSpec over an alpha x d_max grid (`iter_sweep`, with
the other chain rules replayed beside it: `split_rules`, `modeled_leaders`), each owner's Cancel, and
the static runs the calibration tab judges drafts with. Every model
call goes through the `Session` (`session.exclusive`), one at a time."""

from __future__ import annotations

import threading
from typing import Iterator

import pandas as pd

from libraspec.analysis.best_cell import best_cell
from libraspec.drafters import DRAFTERS
from libraspec.engine import DecodeConfig
from libraspec.experiments.driver import RunDone, decode_grid, mode_job
from libraspec.experiments.sweep import SweepEvent, checked_grid, iter_sweep, parse_alphas, parse_d_maxes
from libraspec.modes import BASELINE, MODES, PAPER
from libraspec.paths import PROMPTS_DIR, read_examples, read_prompts
from libraspec.records import RoundRecord
from libraspec.spec import RunSpec, as_number

from .run import LOCAL
from .settings import APP_CAPS, check_settings

EXAMPLES = "examples (app)"
MAX_PROMPTS = 24
RULE_COLUMNS = [
    "mode",
    "d_max",
    "rounds",
    "tau",
    "mean_d",
    "alpha_used",
    "modeled_s",
    "speedup_modeled",
    "mad_vs_oracle",
]


def split_rules(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A sweep's rows as (the grid's LibraSpec cells, every column; the rules replayed beside it, RULE_COLUMNS)."""
    cells = frame["mode"] == PAPER
    return frame[cells].reset_index(drop=True), frame.loc[~cells, RULE_COLUMNS].reset_index(drop=True)


NOT_THE_RECOMMENDATION = (
    "This grid's best cell is for these prompts; the app's recommended alpha (What-if, and the race's "
    '"Use suggested alpha") is replayed on your own races, so the two can differ.'
)  # the sweep's final words (issue 45: every alpha the app suggests says which it is)


def modeled_leaders(frame: pd.DataFrame) -> str:
    """The sweep's last status words: its best cell by modeled speedup (`best_cell` over the LibraSpec
    cells, as the heat map outlines it) and the other rule and d_max fastest modeled beside it, with
    how many rows tie with it (a replay is modeled: no timing noise, only ties); "" without rows."""
    cells, rules = split_rules(frame)
    words = []
    best = best_cell(cells, "speedup_modeled") if len(cells) else None
    if best is not None:
        cell = cells.iloc[best]
        words.append(f"best cell alpha = {cell['alpha']}, d_max = {cell['d_max']} ({cell['speedup_modeled']:.2f}x)")
    elif len(cells) > 1:
        words.append("no cell ahead of the rest")
    speed = pd.to_numeric(rules["speedup_modeled"], errors="coerce")
    if speed.notna().any():
        top = speed.max()
        rule = rules.loc[speed.idxmax()]
        ties = int((speed >= top - 1e-9 * max(1.0, abs(top))).sum()) - 1
        tied = f"; tied with {ties} more" if ties else ""
        label = MODES[rule["mode"]].label if rule["mode"] in MODES else rule["mode"]
        words.append(f"fastest other rule {label} at d_max = {rule['d_max']} ({top:.2f}x{tied})")
    return f"Modeled, same drafts: {'; '.join(words)}." if words else ""


def measured_leader(frame: pd.DataFrame) -> str:
    """The decoded cells' best measured speedup (`best_cell`: ahead of every other beyond timing
    noise), or that none is; "" when no cell was decoded."""
    cells, _ = split_rules(frame)
    measured = pd.to_numeric(cells.get("speedup_measured", pd.Series(dtype=float)), errors="coerce")
    if not measured.notna().any():
        return ""
    best = best_cell(cells, "speedup_measured")
    if best is None:
        return f"Measured ({int(measured.notna().sum())} decoded cells): none ahead of the rest beyond timing noise."
    cell = cells.iloc[best]
    return f"Measured: best alpha = {cell['alpha']}, d_max = {cell['d_max']} ({cell['speedup_measured']:.2f}x)."


def prompt_sets() -> list[str]:
    """The app's examples, then every assets/prompts/*.jsonl file by name."""
    return [EXAMPLES] + sorted(p.name for p in PROMPTS_DIR.glob("*.jsonl"))


def prompt_count(count) -> tuple[int, str]:
    """The number of prompts a sweep runs, clamped to 1..MAX_PROMPTS, and a note when it was ("" if not)."""
    number = as_number(count, "number of prompts")
    fixed = int(min(max(round(number), 1), MAX_PROMPTS))
    return (
        fixed,
        "" if fixed == number else f" Corrected: number of prompts {number:g} -> {fixed} (allowed 1..{MAX_PROMPTS}).",
    )


def load_prompt_set(name: str, count: int) -> list[str]:
    """The first `count` prompts of a set (1..MAX_PROMPTS, `prompt_count`); the examples interleave their categories."""
    if name == EXAMPLES:
        examples = read_examples()
        categories = list(dict.fromkeys(e["category"] for e in examples))
        groups = [[e["prompt"] for e in examples if e["category"] == c] for c in categories]
        prompts = [g[k] for k in range(max(map(len, groups))) for g in groups if k < len(g)]
    elif name in prompt_sets():
        prompts = read_prompts(PROMPTS_DIR / name)
    else:
        raise ValueError(f"unknown prompt set {name!r}; choose one of {', '.join(prompt_sets())}")
    if not 1 <= count <= MAX_PROMPTS:
        raise ValueError(f"number of prompts must be between 1 and {MAX_PROMPTS}, got {count}")
    return prompts[:count]


class Sweeps:
    """The session's sweeps (one cancel event per owner) and calibration runs."""

    def __init__(self, session):
        self.session = session
        self._cancels: dict[str, threading.Event] = {}  # owner -> the cancel event of its running sweep

    def sweep(
        self, prompts: list[str], alphas, d_maxes, max_new_tokens, owner: str = LOCAL, drafter: str | None = None
    ) -> Iterator[tuple[str, SweepEvent | None]]:
        """LibraSpec over an alpha x d_max grid on `prompts` (`iter_sweep`: AR once per prompt, the grid
        replayed from draft traces with the oracle's d*, the other chain rules replayed at each d_max,
        its best cells decoded for real), drafting with `drafter` (None or "": the pair's default);
        yields (status line, event or None), every line naming the drafter, the last one the modeled
        leaders (`modeled_leaders`). `cancel_sweep(owner)` stops it before its next run."""
        parse_alphas(alphas), parse_d_maxes(d_maxes)  # what is not a list of numbers: refused at once
        cancel = self._cancels[owner] = threading.Event()
        try:
            for line in self.session.load():
                yield line, None
            pair = self.session.pair
            grid_alphas, grid_d, grid_notes = checked_grid(alphas, d_maxes, pair.n, pair.max_context, APP_CAPS)
            ids = [pair.encode_prompt(p) for p in prompts]
            spec, corrected = self._checked(pair, ids, max(grid_d), max_new_tokens=max_new_tokens)
            if grid_notes:
                corrected += f" Corrected: {'; '.join(grid_notes)}."
            config = DecodeConfig.of(spec)  # each cell sets its own look-ahead (`iter_sweep`)
            name = drafter or pair.default_drafter
            if name not in DRAFTERS:
                raise ValueError(f"unknown drafter {name!r}; choose one of {', '.join(DRAFTERS)}")
            yield f"Preparing the {name} drafter and a latency profile up to d_max = {max(grid_d)}…", None
            decoder, fallback = self.session.new_decoder(name, self.session.profile_reaching(max(grid_d)))
            used = decoder.drafter.name
            iterator = iter_sweep(decoder, ids, grid_alphas, grid_d, config, cancel)
            for event in self.session.exclusive(iterator):
                state = "Cancelled" if event.cancelled else "Finished" if event.finished else "Running"
                step = "" if event.finished else f" ({event.label})"  # the last line gives the result, not a step
                words = (modeled_leaders(event.frame), measured_leader(event.frame), NOT_THE_RECOMMENDATION)
                result = " Result: " + " ".join(w for w in words if w) if event.finished else ""
                yield (
                    f"{state}: {event.done}/{event.total} runs{step} on {pair.name}, drafting with {used}.{result}"
                    + (f" {fallback}" if fallback else "")
                    + corrected,
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

    def static_run(
        self, prompts: list[str], d, max_new_tokens, drafter: str | None = None
    ) -> Iterator[tuple[str, list[RoundRecord] | None]]:
        """Decode each prompt with the static length d (prompt k with seed k) drafting with `drafter`
        (None or "": the pair's default), so that every drafted position up to d is submitted and
        judged; yields (status line, None) while loading, then (status line, the records so far)
        after each prompt. Each status line names the drafter (and a fallback, if one happened)."""
        for line in self.session.load():
            yield line, None
        pair = self.session.pair
        ids = [pair.encode_prompt(p) for p in prompts]
        spec, corrected = self._checked(pair, ids, d, static_length=d, max_new_tokens=max_new_tokens)
        d = spec.static_length
        decoder, fallback = self.session.decoder_for(drafter)
        used = decoder.drafter.name + (f" ({fallback})" if fallback else "")
        job = mode_job(
            BASELINE,
            BASELINE,
            RunSpec(static_length=d),
            lambda k: DecodeConfig.of(spec, seed=k, lookahead=d),  # the look-ahead of a static run is its d
        )
        records: list[RoundRecord] = []
        for event in self.session.exclusive(decode_grid(decoder, ids, [job], rounds=True)):  # one round per lock
            if isinstance(event, RunDone):
                records += event.records
                done = (
                    f"all {len(prompts)} prompts decoded."
                    if event.done == len(prompts)
                    else f"prompt {event.done}/{len(prompts)} decoded…"
                )
                yield f"Fresh run with the {used} drafter (d = {d}): {done}{corrected}", records

    @staticmethod
    def _checked(pair, ids: list[list[int]], look_ahead, **knobs) -> tuple[RunSpec, str]:
        """`knobs` checked as the race checks them (`check_settings`: clamped to the app's caps and
        to the context window beside the longest prompt and a d_max = `look_ahead` look-ahead) and
        what the check changed of them, as a sentence for the status line ("" when nothing)."""
        spec = RunSpec(d_max=look_ahead, **knobs)
        checked = check_settings(spec, pair.n, pair.max_context, max(map(len, ids), default=0))
        notes = [checked.notes[name] for name in knobs if name in checked.notes]
        return checked.spec, f" Corrected: {'; '.join(notes)}." if notes else ""
