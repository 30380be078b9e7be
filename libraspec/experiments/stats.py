"""Statistics of benchmark runs: speedup intervals over prompts and the regime of the rounds.

Speedup (docs/ARCHITECTURE.md, "What is timed") is a ratio of sums over prompts: AR seconds
per token over a mode's seconds per token. Its 95% interval is a percentile bootstrap over
prompts: each resample draws prompts with replacement and takes the ratio of sums of the
drawn prompts, mode and AR paired by prompt, so prompt-to-prompt variation (length, how
predictable the text is, load that hit one prompt) shows in the interval. Pooled over suites,
the resampling is stratified: each resample draws every suite's prompts from that suite, so
every resample holds the suites in the proportions of the run. Two modes whose
intervals overlap are not distinguishable at this sample size.

The regime of a mode's rounds (`regime_stats`) reads the oracle's d* in hindsight (records'
`oracle_length`) and LibraSpec's Algorithm 1 steps (`policy_steps`). MAD = mean |d - d*| is
shown beside the MAD of two trivial schedules on the same rounds, constant d = 1 and the
static d = n, because when d* is nearly always small a MAD is only as good as theirs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from ..modes import BASELINE, ORACLE, PAPER
from ..records import RoundRecord

RESAMPLES = 2000
LEVEL = 0.95
SEED = 0
# the project's goals for LibraSpec, pooled over suites (the measured report's "Goals"): each a threshold
GOALS = {
    "oracle_ratio": 0.90,  # modeled speedup at least this share of the oracle's
    "static_ratio": 1.10,  # modeled speedup at least this many times the best static length's
    "mad": 2.0,  # mean |d - d*| at most this many tokens
    "mad_ratio": 0.3,  # MAD at most this share of the best static length's
    "measured": 2.0,  # measured speedup over AR at least this
    "policy_share": 0.01,  # the policy's time at most this share of the round's
}
DSTAR_BINS = (("0", 0, 0), ("1", 1, 1), ("2", 2, 2), ("3", 3, 3), ("4-7", 4, 7), ("8+", 8, None))


def per_prompt(runs: Sequence[Sequence[RoundRecord]], ar_runs: Sequence[Sequence[RoundRecord]] | None) -> list[dict]:
    """One row per prompt: the mode's tokens, measured and modeled seconds, and AR's on the same prompt."""
    rows = []
    for index, run in enumerate(runs):
        row = {
            "tokens": sum(r.tau for r in run),
            "wall_s": sum(r.measured_s for r in run),
            "modeled_s": sum(r.modeled_s for r in run),
        }
        if ar_runs:
            ar = ar_runs[index]
            row |= {
                "ar_tokens": sum(r.tau for r in ar),
                "ar_wall_s": sum(r.measured_s for r in ar),
                "ar_modeled_s": sum(r.modeled_s for r in ar),
            }
        rows.append(row)
    return rows


def resample_indices(strata: Sequence, resamples: int, seed: int) -> np.ndarray:
    """(R, P) prompt indices: each row draws, for every stratum, as many of its prompts as it has,
    with replacement, from that stratum only (one stratum: the plain bootstrap over prompts)."""
    rng = np.random.default_rng(seed)
    labels = np.asarray([str(s) for s in strata])
    draws = np.empty((resamples, len(labels)), dtype=np.int64)
    for label in dict.fromkeys(labels):
        members = np.flatnonzero(labels == label)  # (P_s,)
        draws[:, members] = members[rng.integers(0, len(members), size=(resamples, len(members)))]
    return draws


def pooled_speedup(rows: Sequence[dict], seconds: str) -> float:
    """The speedup over AR of `per_prompt` rows, pooled: AR's seconds per token over the mode's, each
    a ratio of sums over the prompts (`seconds`: "wall_s" or "modeled_s"); its interval is
    `speedup_interval`'s."""
    ar = sum(r[f"ar_{seconds}"] for r in rows) / sum(r["ar_tokens"] for r in rows)
    return ar / (sum(r[seconds] for r in rows) / sum(r["tokens"] for r in rows))


def speedup_interval(
    rows: Sequence[dict],
    seconds: str,
    ar_rate: float | None = None,
    resamples: int = RESAMPLES,
    level: float = LEVEL,
    seed: int = SEED,
    strata: Sequence | None = None,
) -> tuple[float, float] | None:
    """Percentile bootstrap interval of the speedup over prompts (`per_prompt` rows).

    seconds: "wall_s" (measured) or "modeled_s". AR's seconds per token come from the rows'
    ar_* fields of the same prompts, or are the constant `ar_rate` (the profile's AR step).
    strata: one label per row (the suite); prompts are resampled within their stratum.
    None without AR or when a resample has no time.
    """
    if not rows or (ar_rate is None and "ar_tokens" not in rows[0]):
        return None
    if strata is not None and len(strata) != len(rows):
        raise ValueError(f"strata needs one label per prompt: {len(strata)} for {len(rows)}")
    tokens = np.array([r["tokens"] for r in rows], dtype=float)  # (P,)
    spent = np.array([r[seconds] for r in rows], dtype=float)  # (P,)
    draws = resample_indices(strata if strata is not None else [0] * len(rows), resamples, seed)  # (R, P)
    mode_rate = spent[draws].sum(axis=1) / tokens[draws].sum(axis=1)  # (R,) seconds per token
    if ar_rate is None:
        ar_tokens = np.array([r["ar_tokens"] for r in rows], dtype=float)
        ar_spent = np.array([r[f"ar_{seconds}"] for r in rows], dtype=float)
        ar = ar_spent[draws].sum(axis=1) / ar_tokens[draws].sum(axis=1)  # (R,)
    else:
        ar = np.full(resamples, ar_rate)
    if (mode_rate <= 0).any():
        return None
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(ar / mode_rate, (tail, 100 - tail))
    return float(low), float(high)


def distinguishable(a: Sequence[float] | None, b: Sequence[float] | None) -> bool | None:
    """True when two intervals do not overlap, None when either is missing."""
    if a is None or b is None:
        return None
    return a[1] < b[0] or b[1] < a[0]


def dstar_histogram(judged: Sequence[int]) -> dict[str, int]:
    """Counts of d* in the bins 0, 1, 2, 3, 4-7, 8+."""
    return {name: sum(low <= d and (high is None or d <= high) for d in judged) for name, low, high in DSTAR_BINS}


def regime_stats(frame: pd.DataFrame, n: int) -> dict:
    """The regime of one mode's rounds (a records frame, `records_to_frame` or `read_trace`).

    d*: its histogram over the rounds that carry one (`judged`) and the share with d* >= 3.
    MAD of two trivial schedules on the same rounds, constant d = 1 and static d = n, to set
    beside the mode's own MAD (`records.summarize`'s mad_vs_oracle, over the same rounds).
    Algorithm 1 (LibraSpec's policy steps; 0 for other modes): shares of rounds that extend d,
    roll back below the d they reached, draft a further block, and where d_max bound (an
    extension whose eps* exceeded the cap). Also AR steps (d = 0) and the largest d.
    Shares over no rounds are None.
    """

    def share(count: int, total: int) -> float | None:
        return count / total if total else None

    pairs = [(int(d), int(o)) for d, o in zip(frame["chosen_length"], frame["oracle_length"]) if pd.notna(o)]
    judged = [o for _, o in pairs]
    steps = list(frame["policy_steps"])
    rounds = len(frame)

    def mad(schedule) -> float | None:  # mean |schedule(d) - d*|
        return share(sum(abs(schedule(d) - o) for d, o in pairs), len(pairs))

    return {
        "rounds": rounds,
        "judged": len(judged),
        "dstar_histogram": dstar_histogram(judged),
        "dstar_ge3_count": sum(d >= 3 for d in judged),
        "dstar_ge3": share(sum(d >= 3 for d in judged), len(judged)),
        "mad_constant_1": mad(lambda d: 1),
        "mad_static_n": mad(lambda d: n),
        "extends": share(sum(any(not s["rollback"] for s in st) for st in steps), rounds),
        "rolls_back": share(
            sum(any(s["rollback"] and s["d_after"] < s["d_before"] for s in st) for st in steps), rounds
        ),
        "further_block": share(sum(any(s["blocks_requested"] > 0 for s in st) for st in steps), rounds),
        "d_max_bound": share(
            sum(any(not s["rollback"] and s["eps_star"] > s["d_after"] for s in st) for st in steps), rounds
        ),
        "ar_steps": share(int((frame["chosen_length"] == 0).sum()), rounds),
        "max_d": int(frame["chosen_length"].max()) if rounds else None,
    }


# -- verdicts on mode summaries (bench.mode_summary entries, by label) --------------------------------


def compare(a: dict, b: dict, key: str) -> str:
    """How mode a's speedup `key` stands against b's: "faster", "slower", "not distinguishable" (the
    95% intervals overlap) or "without an interval"."""
    apart = distinguishable(a[f"{key}_ci"], b[f"{key}_ci"])
    if apart is None:
        return "without an interval"
    if not apart:
        return "not distinguishable"
    return "faster" if a[key] > b[key] else "slower"


def best_static(modes: dict, key: str = "best") -> str | None:
    """The marked best static label (measured), or the best by `key` when key is a metric."""
    statics = [k for k, e in modes.items() if e["mode"] == BASELINE]
    if not statics:
        return None
    if key == "best":
        return next((k for k in statics if modes[k].get("best", True)), statics[0])
    return max(statics, key=lambda k: modes[k][key] or 0.0)


@dataclass(frozen=True)
class Goal:
    """One of `GOALS` judged on LibraSpec's summary: its figure, whether it is met (None: n/a, no
    figure), and the label it is measured against (the best static length, where one is)."""

    key: str
    value: float | None
    met: bool | None
    against: str | None = None


def goals(modes: dict) -> list[Goal]:
    """Every goal of `GOALS`, judged on LibraSpec's entry of `modes` (none without LibraSpec)."""
    lib = modes.get(PAPER)
    if lib is None:
        return []
    oracle, best_m, marked = modes.get(ORACLE), best_static(modes, "speedup_modeled"), best_static(modes)

    def ratio(a, b):
        return None if a is None or not b else a / b

    figures = [
        ("oracle_ratio", ratio(lib["speedup_modeled"], oracle and oracle["speedup_modeled"]), None),
        ("static_ratio", ratio(lib["speedup_modeled"], best_m and modes[best_m]["speedup_modeled"]), best_m),
        ("mad", lib["mad_vs_oracle"], None),
        ("mad_ratio", ratio(lib["mad_vs_oracle"], marked and modes[marked]["mad_vs_oracle"]), marked),
        ("measured", lib["speedup_measured"], None),
        ("policy_share", lib["policy_share"], None),
    ]
    at_most = {"mad", "mad_ratio", "policy_share"}  # the others: at least the threshold
    return [
        Goal(
            key,
            value,
            None if value is None else (value <= GOALS[key] if key in at_most else value >= GOALS[key]),
            against,
        )
        for key, value, against in figures
    ]


def goal_met(verdicts: Sequence[bool | None]) -> bool | None:
    """A goal over several temperatures: met when it holds at every one, None when it applies at none."""
    if all(v is None for v in verdicts):
        return None
    return all(v is True for v in verdicts)
