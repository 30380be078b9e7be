"""The visitor's tries side by side: tuning alpha, d_max and the rest comparably (issue 34).

One row per finished race and raced mode, read from the races' records only: the settings that
mode used, tau, the modeled speedup and the measured one with its timing noise (one standard
deviation, `records.timing_noise_s`), the share of rounds where d_max bound d, the counts of
Algorithm 1's iterations by action (extend / roll back / stop, `records.step_action`) and a digest
of the work done (`sweep.decisions_digest`: each round's d, drafting steps, tree size and accepted
count). `history_notes` says when d_max never bound and when two tries did identical work (their
measured difference is noise alone). No gradio here.
"""

from __future__ import annotations

import pandas as pd

from libraspec.experiments.sweep import decisions_digest
from libraspec.modes import MODES

COLUMNS = [
    "try",
    "prompt",
    "drafter",
    "mode",
    "alpha",
    "d_max",
    "static length",
    "LibraSpec start",
    "rounds",
    "tau",
    "speedup modeled",
    "speedup measured",
    "measured noise (1 sd)",
    "d_max bound (share of rounds)",
    "extend",
    "roll back",
    "stop",
    "decisions",
]


def history_frame(runs) -> pd.DataFrame:
    """One row per finished race (oldest first, numbered from 1) and raced mode."""
    rows = []
    for number, run in enumerate((r for r in runs if r.finished), start=1):
        for mode in run.modes:
            records = run.records.get(mode) or []
            summary = run.summary(mode)
            if not records or summary is None:
                continue
            seconds = run.seconds(mode)
            noise = summary.speedup_measured * run.noise_s(mode) / seconds if seconds > 0 else float("nan")
            actions = [step.action for r in records for step in r.policy_steps]
            knobs = MODES[mode].knobs
            d_max = run.settings.d_max if "d_max" in knobs else None
            bound = sum(r.chosen_length == d_max for r in records) / len(records) if d_max else None
            rows.append(
                {
                    "try": number,
                    "prompt": run.prompt[:40],
                    "drafter": run.drafter,
                    "mode": MODES[mode].label,
                    "alpha": run.settings.alpha if "alpha" in knobs else None,
                    "d_max": d_max,
                    "static length": run.settings.static_length if "static_length" in knobs else None,
                    # None: unset, Algorithm 1 as written (d starts at the drafter's n)
                    "LibraSpec start": run.settings.libraspec_start if "libraspec_start" in knobs else None,
                    "rounds": len(records),
                    "tau": round(summary.tau, 3),
                    "speedup modeled": round(summary.speedup_modeled, 3),
                    "speedup measured": round(summary.speedup_measured, 3),
                    "measured noise (1 sd)": round(noise, 3),
                    "d_max bound (share of rounds)": None if bound is None else round(bound, 3),
                    "extend": actions.count("extend"),
                    "roll back": actions.count("roll back"),
                    "stop": actions.count("stop"),
                    "decisions": decisions_digest([records]),
                }
            )
    frame = pd.DataFrame(rows, columns=COLUMNS)
    for column in ("d_max", "static length"):  # integers with gaps: not 14.0
        frame[column] = frame[column].astype("Int64")
    return frame


def history_notes(frame: pd.DataFrame) -> list[str]:
    """What a reader of the table should not miss: d_max that never bound, identical decisions."""
    notes = []
    unbound = frame[frame["d_max bound (share of rounds)"] == 0]
    for d_max, group in unbound.groupby("d_max", sort=True):  # one line per d_max, however many tries
        tries = ", ".join(f"{row['try']} ({row['mode']})" for _, row in group.iterrows())
        which = f"try {tries}" if len(group) == 1 else f"tries {tries}"
        notes.append(f"d_max = {d_max} never bound d in {which}, so a larger d_max would have decided the same.")
    for (prompt, drafter, mode, digest), group in frame.groupby(["prompt", "drafter", "mode", "decisions"]):
        if len(group) > 1:
            tries = ", ".join(str(t) for t in group["try"])
            notes.append(
                f"Tries {tries} ({mode}, same prompt and drafter) made identical decisions: their measured "
                "speedups differ by timing noise alone; they are one tie."
            )
    return notes
