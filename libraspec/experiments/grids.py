"""Benchmark grids from replay: every length policy and setting priced from draft traces, pooled over prompts.

A grid row is a configuration (a mode and its settings, or the best schedule in hindsight);
`replay_rows` replays it over traces under one latency profile and returns one `stats.per_prompt`
row per prompt (modeled seconds only: nothing is timed), `lockstep_rows` the same for groups
of B requests in lock-step (`analysis.regimes.lockstep`), and `summarize` pools them: the
ratio of sums over prompts (AR's modeled seconds per token over the configuration's) with its
95% bootstrap interval over prompts, stratified by suite, tau and mean d. Rows whose rounds made
identical decisions on every prompt are found by `decision_digest` and reported as one tie.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..analysis.regimes import lockstep
from ..analysis.replay import ReplayDecoder, best_schedule, trace_config
from ..analysis.trace import DraftTrace
from ..cost import LatencyProfile, ar_text_s
from ..group import PADDED
from ..modes import AR, BASELINE, MODES, ORACLE, PAPER, POLICY_MODES, TREE_MODES
from ..records import RoundRecord
from ..serving.vllm import OnlineCalibration
from ..spec import RunSpec
from .bench import PUBLISHED, label_title
from .driver import AUTO, alpha_policy
from .stats import pooled_speedup, speedup_interval

BEST = "best schedule"
ALPHAS = (1.0, 2.0, 2.2, 4.0, 8.0, 16.0, 32.0, 64.0)
D_MAXES = (8, 16, 24, 32, 48, 60)
NODE_BUDGETS = (16, 32, 64)


@dataclass(frozen=True)
class Config:
    """One row of a grid: `mode` with `settings`; mode BEST is the hindsight schedule, "auto" in
    `alpha_auto` sets the mode's LibraSpec alpha online (`driver.alpha_policy`), `online_q` hands
    the mode's policy q_i calibrated online (`serving.vllm.OnlineCalibration`)."""

    label: str
    mode: str
    settings: RunSpec = RunSpec()
    alpha_auto: bool = False
    online_q: bool = False


ONLINE_Q = " + online q"  # a row label's suffix: the same rule with q_i calibrated online


def online_q_modes() -> tuple[str, ...]:
    """The chain modes whose rows also run with q_i calibrated online: LibraSpec and the priced chain rules
    (LibraSpec priced, vLLM adaptive), the rules vLLM's calibration serves (its own adaptive rule) and
    this project's subject; the other q-reading rules (FailFast, transformers' threshold, which re-fits
    its own threshold) run as their sources ship them."""
    return tuple(m for m in POLICY_MODES if m == PAPER or (MODES[m].priced and MODES[m].kind == "policy"))


def chain_grid(n: int, d_max: int = RunSpec.d_max) -> list[Config]:
    """Static 1..2n and d_max, LibraSpec over alpha (and automatic) at d_max and over d_max at the
    default alpha, every other chain policy of the registry (G4, FailFast, LibraSpec priced, the
    serving engines' rules), FailFast with the FailFast paper's settings, the q-reading rules with q
    calibrated online, the oracle and the best schedule."""
    base = RunSpec(d_max=d_max)
    rows = [Config("AR", AR)]
    rows += [Config(f"static d={d}", BASELINE, dataclasses.replace(base, static_length=d)) for d in range(1, 2 * n + 1)]
    if d_max > 2 * n:
        rows.append(Config(f"static d={d_max}", BASELINE, dataclasses.replace(base, static_length=d_max)))
    lib = MODES[PAPER].label
    rows += [Config(f"{lib} alpha={a:g}", PAPER, dataclasses.replace(base, alpha=a)) for a in ALPHAS]
    rows.append(Config(f"{lib} alpha=auto", PAPER, base, alpha_auto=True))
    rows += [Config(f"{lib} d_max={d}", PAPER, dataclasses.replace(base, d_max=d)) for d in D_MAXES if d != d_max]
    rows += [Config(MODES[mode].label, mode, base) for mode in POLICY_MODES if mode not in (BASELINE, PAPER)]
    rows += [  # each mode with its own paper's settings (FailFast)
        Config(label_title(label), mode, dataclasses.replace(base, **dict(MODES[mode].published)))
        for label, mode in PUBLISHED.items()
    ]
    rows += [Config(rule_label(mode) + ONLINE_Q, mode, base, online_q=True) for mode in online_q_modes()]
    rows.append(Config("oracle d* per round", ORACLE, base))
    rows.append(Config(BEST, BEST, base))
    return rows


def rule_label(mode: str) -> str:
    """A chain rule's row label in every grid: the paper's at the default alpha, every other mode its label."""
    return f"{MODES[PAPER].label} alpha={RunSpec.alpha:g}" if mode == PAPER else MODES[mode].label


def engine_grid(n: int, d_max: int = RunSpec.d_max) -> list[Config]:
    """The rows "LibraSpec against the engines' rules" replays in every regime, lock-step groups
    included: the static lengths (for the best of them), LibraSpec at the default alpha and priced,
    every other chain policy (the serving engines' rules, G4, FailFast) and the online-q rows."""
    return [
        c
        for c in chain_grid(n, d_max)
        if c.mode not in (AR, ORACLE, BEST)
        and not c.alpha_auto
        and (c.mode != PAPER or c.settings == RunSpec(d_max=d_max))
    ]


def tree_grid(d_max: int = RunSpec.d_max) -> list[Config]:
    """Every tree mode at each node budget (ddtree-marginal's and ddtree-priced's as their cap)."""
    base = RunSpec(d_max=d_max)
    return [
        Config(f"{mode} nodes={b}", mode, dataclasses.replace(base, node_budget=b))
        for mode in TREE_MODES
        for b in NODE_BUDGETS
    ]


def replay_config(trace: DraftTrace, config: Config, profile: LatencyProfile) -> list[RoundRecord]:
    """The rounds of `config` on one trace under `profile` (empty for BEST, which has no records)."""
    settings, _ = config.settings.checked(trace.n, context=trace.max_positions)
    decoder = ReplayDecoder.from_trace(trace, profile)
    cfg = trace_config(trace, settings)
    policy = alpha_policy(config.mode, settings, AUTO if config.alpha_auto else settings.alpha, profile)
    if config.online_q:
        policy = OnlineCalibration(policy)
    return list(decoder.run(list(trace.prompt), config.mode, policy, cfg))


def decision_digest(records: Sequence[RoundRecord]) -> str:
    """What a run decided, round by round: d, drafting steps, tree size and accepted count."""
    text = ";".join(f"{r.chosen_length},{r.blocks_drafted},{r.tree_size},{r.accepted}" for r in records)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def replay_rows(traces: Sequence[DraftTrace], config: Config, profile: LatencyProfile) -> list[dict]:
    """One row per trace: tokens, modeled seconds, AR's, rounds, sum of d, and the decisions' digest."""
    rows = []
    for trace in traces:
        ar_s = ar_text_s(profile, len(trace.prompt), len(trace.output))
        if config.mode == BEST:
            # hindsight over lengths up to the longest d_max any grid tries (D_MAXES)
            schedule = best_schedule(trace, profile, lookahead=min(trace.lookahead, max(D_MAXES)))
            rounds, lengths, digest = len(schedule.lengths), sum(schedule.lengths), ""
            nodes = lengths
            seconds = schedule.seconds
        else:
            records = replay_config(trace, config, profile)
            rounds, lengths = len(records), sum(r.chosen_length for r in records)
            seconds, digest = records[-1].cumulative_modeled_s, decision_digest(records)
            nodes = sum(r.tree_size or r.chosen_length for r in records)
        rows.append(
            {
                "tokens": len(trace.output),
                "modeled_s": seconds,
                "ar_tokens": len(trace.output),
                "ar_modeled_s": ar_s,
                "rounds": rounds,
                "sum_d": lengths,
                "sum_nodes": nodes,  # drafts verified: a tree's nodes, a chain's d
                "digest": digest,
            }
        )
    return rows


def lockstep_rows(
    groups: Sequence[Sequence[DraftTrace]],
    config: Config,
    profiles: dict[int, LatencyProfile],
    batching: str = PADDED,
) -> list[dict]:
    """One row per group of requests decoded in lock-step (`regimes.lockstep`), each round's forward
    priced `batching`: "padded" (every request pays the longest) or "ragged" (the group's tokens)."""
    rows = []
    for group in groups:
        result = lockstep(
            list(group), config.mode, profiles, config.settings, batching=batching, online_q=config.online_q
        )
        tokens = sum(len(t.output) for t in group)
        rows.append(
            {
                "tokens": tokens,
                "modeled_s": result.seconds,
                "ar_tokens": tokens,
                "ar_modeled_s": result.ar_seconds,
                "rounds": result.request_rounds,
                "sum_d": result.sum_d,
                "sum_nodes": result.verified_rows - result.request_rounds,
                "digest": "",
            }
        )
    return rows


def summarize(rows: Sequence[dict], strata: Sequence | None = None) -> dict:
    """Pooled modeled speedup (ratio of sums), its 95% bootstrap interval over prompts, tau, mean d."""
    tokens = sum(r["tokens"] for r in rows)
    rounds = sum(r["rounds"] for r in rows)
    interval = speedup_interval(list(rows), "modeled_s", strata=strata)
    return {
        "speedup": pooled_speedup(rows, "modeled_s"),
        "interval": list(interval) if interval else None,
        "tau": tokens / rounds if rounds else None,
        "mean_d": sum(r["sum_d"] for r in rows) / rounds if rounds else None,
        "mean_nodes": sum(r["sum_nodes"] for r in rows) / rounds if rounds else None,
        "prompts": len(rows),
        "digest": (
            hashlib.sha256("".join(r["digest"] for r in rows).encode()).hexdigest()[:16]
            if all(r["digest"] for r in rows)
            else None  # the best schedule and lock-step groups record no decisions to compare
        ),
    }


def ties(summaries: dict[str, dict]) -> dict[str, str]:
    """label -> the first label (in order) whose rounds made identical decisions on every prompt."""
    first: dict[str, str] = {}
    out = {}
    for label, summary in summaries.items():
        digest = summary.get("digest")
        if not digest:
            continue
        if digest in first:
            out[label] = first[digest]
        else:
            first[digest] = label
    return out


def paired_ratio(rows_a: Sequence[dict], rows_b: Sequence[dict], strata: Sequence | None = None) -> dict:
    """A's modeled speed over B's on the same prompts (or lock-step groups), as a ratio of sums
    (B's seconds per token over A's) with its 95% bootstrap interval, prompts resampled in pairs
    (`stats.speedup_interval` with B in AR's place); a ratio above 1 means A is faster."""
    if len(rows_a) != len(rows_b):
        raise ValueError(f"a paired ratio needs the same prompts: {len(rows_a)} and {len(rows_b)} rows")
    paired = [
        {"tokens": a["tokens"], "modeled_s": a["modeled_s"], "ar_tokens": b["tokens"], "ar_modeled_s": b["modeled_s"]}
        for a, b in zip(rows_a, rows_b)
    ]
    ratio = pooled_speedup(paired, "modeled_s")  # B in AR's place
    interval = speedup_interval(paired, "modeled_s", strata=strata)
    return {"ratio": ratio, "interval": list(interval) if interval else None}


def share(a: dict, b: dict) -> float:
    """a's modeled speed as a share of b's (a / b of their speedups)."""
    return float(np.float64(a["speedup"]) / b["speedup"])
