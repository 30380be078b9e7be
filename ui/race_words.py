"""A race in words: the verdict, the JSON report, the progress line, the notes on the machine's
load and the latency profile, and one round's narrative. Views of a `run.Run` and of
`profile_check` results; nothing here decodes or measures."""

from __future__ import annotations

import dataclasses
import math

from libraspec.drafters import SOURCE_TITLES
from libraspec.modes import MODES, PAPER
from libraspec.profiling import PROFILE_TOLERANCE, within
from libraspec.records import NOISE_Z, RoundRecord, RunSummary, summarize
from libraspec.views import plots

from .render import duration, eta_text, title
from .run import Run
from .settings import FLAT_C_S, Suggestion


def verdict(run: Run) -> str | None:
    """Who was fastest, or that no mode was faster beyond noise; None before two modes finish.

    The fastest wins only when it is beyond the noise of every other finished mode: "within noise"
    is not transitive (a slow mode with a wide noise can reach the fastest while the runner-up,
    with a narrow one, does not), and the verdict agrees with each mode's `tied_with`."""
    finished = run.finished_modes()
    if len(finished) < 2:
        return None
    first, second = finished[:2]
    tied = run.tied_with(first)
    if not tied:
        noise = NOISE_Z * math.hypot(run.noise_s(first), run.noise_s(second))
        return (
            f"{title(first)} was fastest: {duration(run.seconds(first))} vs "
            f"{duration(run.seconds(second))} for {title(second)}, a gap beyond the timing "
            f"noise of ±{duration(noise)}."
        )
    noise = NOISE_Z * max(math.hypot(run.noise_s(first), run.noise_s(m)) for m in tied)
    tied = [first] + tied
    single = [m for m in tied if not run.noise_known(m)]
    if single:  # one round gives no measure of timing noise: nothing can be told apart
        return (
            f"No clear winner: {', '.join(title(m) for m in tied)} finished in "
            f"{', '.join(duration(run.seconds(m)) for m in tied)}, but {', '.join(title(m) for m in single)} "
            f"ran a single round, which gives no measure of the timing noise: race more tokens to compare."
        )
    return (
        f"No clear winner: {', '.join(title(m) for m in tied)} finished within the timing noise "
        f"of the fastest ({', '.join(duration(run.seconds(m)) for m in tied)}; noise ±{duration(noise)})."
    )


def run_report(run: Run) -> dict:
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
    for mode in run.modes:
        entry = clean(run.summary(mode)) or {}
        entry["finish_rank"] = run.rank(mode)
        entry["within_noise_of"] = run.tied_with(mode)
        entry["noise_s"] = run.noise_s(mode) if run.records.get(mode) else None
        modes[mode] = entry
    ar = clean(summarize(run.ar_records)) if run.ar_records else None
    return {
        "run_id": run.run_id,
        "model": run.model,
        "n": run.n,
        "drafter": run.drafter,
        "race_modes": list(run.modes),
        "settings": dataclasses.asdict(run.settings),
        "notes": list(run.notes),
        "finished": run.finished,
        "verdict": verdict(run),
        "modes": modes,
        "ar": ar,
    }


def race_progress(run: Run, elapsed_s: float) -> str:
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


def drift(check: dict) -> str:
    """What `profile_check` found, in words."""
    return (
        f"the AR baseline took {1000 * check['measured_ar_s']:.1f} ms a token where the latency profile said "
        f"{1000 * check['profile_ar_s']:.1f} ms (more than ±{PROFILE_TOLERANCE:.0%} off)"
    )


def kept_profile(check: dict, now: dict) -> str:
    """The run's note when its baseline ran off the profile but the AR step re-timed now agrees with it."""
    return (
        f"latency profile kept: {drift(check)}, but the AR step re-timed now took {1000 * now['measured_ar_s']:.1f} ms "
        f"against the profile's {1000 * now['profile_ar_s']:.1f} ms (within ±{PROFILE_TOLERANCE:.0%}): the "
        "baseline's own noise, not a change of load"
    )


def remeasured(before: dict, after: dict) -> str:
    """The run's note after a re-measured profile (`before`, `after`: `profile_check` of each)."""
    note = (
        f"latency profile re-measured before this race: {drift(before)}; it now says "
        f"{1000 * after['profile_ar_s']:.1f} ms"
    )
    if not after["ok"]:
        note += (
            f", still more than ±{PROFILE_TOLERANCE:.0%} off: the machine's load is changing, so the modeled "
            "speedups are uncertain"
        )
    return note


def load_change_note(ar_records: list[RoundRecord], race_records: list[RoundRecord]) -> str | None:
    """A note when the race ran under another load than its AR baseline, None otherwise.

    Both are measured against the same latency profile, so their measured / modeled time
    ratios agree on a steady machine (how closely: BENCHMARKS.md, "Measured check"); when the race's
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


def round_info(run: Run, mode: str, round_index: int) -> str:
    """One round in words: what was drafted from which source, what Algorithm 1 did, d, a, d*."""
    records = [r for r in run.records.get(mode, []) if r.round_index == round_index]
    if not records:
        return f"No round {round_index} for {title(mode)} in this run."
    r = records[0]
    head = f"**Round {r.round_index} · {title(mode)} · drafter {run.drafter}.**"
    if r.chosen_length == 0 and not any(r.confidences):
        return (
            f"{head} The drafter had nothing to offer, so this round was an AR step (d = 0): the target "
            "produced one token on its own."
        )
    spans, start = [], 0
    sources = list(r.draft_sources) or ["dflash"] * len(r.confidences)
    for k in range(1, len(sources) + 1):
        if k == len(sources) or sources[k] != sources[start]:
            spans.append(f"{start + 1}–{k}: {SOURCE_TITLES.get(sources[start], sources[start])}")
            start = k
    steps = len(r.policy_steps)
    algorithm = (
        f" Algorithm 1 ran {steps} iteration{'s' if steps != 1 else ''}"
        f"{f' (the last: {r.policy_steps[-1].action})' if steps and r.policy_steps[-1].rollback else ''}."
        if mode == PAPER or steps
        else ""
    )
    bonus = " and then added its own token" if r.bonus_token is not None else ""
    drafted = (
        f"{head} Drafted {r.blocks_drafted} step{'s' if r.blocks_drafted != 1 else ''} of n = {run.n} "
        f"(positions {'; '.join(spans)}).{algorithm}"
    )
    if plots.is_tree_mode(mode):
        oracle = (
            f"; in hindsight depth {r.oracle_length} with {r.oracle_tree_size} nodes was best"
            if r.oracle_length is not None and r.oracle_tree_size is not None
            else ""
        )
        return (
            f"{drafted} The tree holds {r.tree_size} node{'s' if r.tree_size != 1 else ''} (node budget "
            f"{run.settings.node_budget}) up to depth d = {r.chosen_length}; the target accepted a path of "
            f"{r.accepted}{bonus}{oracle}."
        )
    oracle = f"; oracle d* = {r.oracle_length}" if r.oracle_length is not None and MODES[mode].kind != "oracle" else ""
    return f"{drafted} Submitted d = {r.chosen_length}; the target accepted {r.accepted}{bonus}{oracle}."


def alpha_advice(suggestion: Suggestion) -> str:
    """Section 3.4's suggested alpha in words: the value and what it was computed from (the top of
    the range, and why, when this machine's latency fit is flat)."""
    s = suggestion
    rounds = f"mean tau = {s.tau:.2f}, mean d = {s.d} over the {s.rounds} rounds that submitted drafts"
    if s.c_ms <= 1000 * FLAT_C_S:
        return (
            f"alpha = {s.alpha:g}, the top of the allowed range: this machine's latency fit has c = "
            f"{s.c_ms:.3f} ms per verified position (a longer verification measured no slower), so "
            f"alpha = T_verify / (tau c) has no finite value; {rounds}"
        )
    return (
        f"alpha = T_verify / (tau c) = {s.alpha:.2f}, with T_verify at d = {s.d} and c = "
        f"{s.c_ms:.3f} ms per verified position from this machine's latency fit, and {rounds}"
    )


def tree_reasons(run, mode: str, record: RoundRecord, profile, pair_name: str | None) -> list[str] | None:
    """Why each node of a ddtree-marginal or ddtree-priced round entered (`Mode.node_reasons`),
    priced by `profile` (the session's: the race's own unless it was measured again since); None
    for other modes, or when the profile is unknown or belongs to another pair than the race's."""
    if profile is None or run.model != pair_name:
        return None
    earlier = [r for r in run.records.get(mode, []) if r.round_index < record.round_index]
    return MODES[mode].node_reasons(run.settings, profile, earlier, record)  # the race's checked spec
