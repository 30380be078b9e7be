"""The measured report (`report.run_report`'s REPORT.md) in words: tables, goals, evidence. The
paper's figures it compares with are data (paper.py); BENCHMARKS.md is written by
benchmarks/replay_report.py.

Paper symbols: d the speculative length, d* the oracle length, n the block size, d_max
the cap, alpha the Algorithm 1 trade-off, q_i the drafter confidence of draft i,
tau = accepted + 1 tokens per round, eta the speedup over AR decoding.

Speedups are totals over prompts (bench.mode_summary) with 95% bootstrap intervals over
prompts (stats.py); two modes whose intervals overlap are reported as not distinguishable,
never as a winner and a loser. Every table's first header cell states its sample (prompts
x new tokens) and says "quick" for a `--quick` run. "Pooled" rows add the rounds of every
suite at one temperature (their intervals resample the prompts of every suite). Acceptance
by position and calibration read the per-round records through `calibration` (its judged
drafts, `tested_only=True`): draft i counts when it was submitted (d >= i) and every draft
before it was accepted (a >= i - 1); it is accepted when a >= i. The oracle mode is left out
of both, since it picks d knowing where the first mismatch is. The expected tau of the limits
section is `theory`'s.
"""

from __future__ import annotations

import datetime

import pandas as pd

from ..analysis.calibration import (
    acceptance_by_position,
    acceptance_samples,
    expected_calibration_error,
    reliability_table,
)
from ..analysis.theory import expected_tau_curve
from ..modes import AR, BASELINE, MODES, PAPER
from ..spec import NAMES
from .bench import PUBLISHED, label_title, mode_summary
from .driver import alpha_label
from .paper import REPORTED
from .provenance import BUSY_SHARE, shown_path
from .stats import DSTAR_BINS, GOALS, best_static, compare, goal_met, goals

QUICK_NOTE = "**Quick run** (`--quick`): too small a sample for the conclusions of a full run. "


def _x(value, digits: int = 2, suffix: str = "x") -> str:
    return "-" if value is None else f"{value:.{digits}f}{suffix}"


def _f(value, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:.2f}%"


def speedup_text(value, interval=None, digits: int = 2) -> str:
    """A speedup with its 95% interval when it has one: 1.23x [1.10-1.35] (every report's format)."""
    if value is None:
        return "-"
    return _x(value, digits) + ("" if interval is None else f" [{interval[0]:.{digits}f}-{interval[1]:.{digits}f}]")


def sample_tag(plan, prompts: int) -> str:
    """The sample behind a table, for its first header cell: (16 prompts x 128 tokens) or (quick: ...)."""
    return f" ({'quick: ' if plan.quick else ''}{prompts} prompts x {plan.max_new_tokens} tokens)"


def _label_name(label: str, entry: dict) -> str:
    if entry["mode"] == BASELINE:
        return f"static d={entry['length']}" + (" **(best)**" if entry.get("best") else "")
    return label_title(label)


def _plain(label: str | None, modes: dict) -> str:
    return "-" if label is None else _label_name(label, modes[label]).replace(" **(best)**", "")


def _table(header: list[str], rows: list[list[str]], tag: str) -> list[str]:
    """A markdown table; `tag` (sample_tag) is appended to the first header cell."""
    header = [header[0] + tag] + header[1:]
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return out + ["| " + " | ".join(row) + " |" for row in rows]


def _modes_table(modes: dict, tag: str) -> list[str]:
    header = [
        "mode",
        "speedup measured [95% CI]",
        "speedup modeled [95% CI]",
        "tau",
        "mean d",
        "MAD to d*",
        "policy share",
        "tokens",
    ]
    rows = [
        [
            _label_name(label, e),
            speedup_text(e["speedup_measured"], e["speedup_measured_ci"]),
            speedup_text(e["speedup_modeled"], e["speedup_modeled_ci"]),
            _f(e["tau"]),
            _f(e["mean_length"], 1),
            _f(e["mad_vs_oracle"]),
            _pct(e["policy_share"]),
            str(e["tokens"]),
        ]
        for label, e in modes.items()
    ]
    return _table(header, rows, tag)


PHRASES = {
    "faster": "faster than",
    "slower": "slower than",
    "not distinguishable": "not distinguishable from",
    "without an interval": "no interval to compare with",
}


def comparisons(modes: dict) -> list[str]:
    """Sentences under a modes table: LibraSpec against every other speculative mode, and the best
    static against the other static lengths, by the overlap of their 95% intervals."""
    out = []
    others = [k for k, e in modes.items() if e["mode"] not in (AR, PAPER)]
    for key, what in (("speedup_measured", "measured"), ("speedup_modeled", "modeled")):
        if PAPER in modes and others:
            verdicts: dict[str, list[str]] = {}
            for label in others:
                verdicts.setdefault(compare(modes[PAPER], modes[label], key), []).append(_plain(label, modes))
            out.append(
                f"- LibraSpec, {what}: "
                + "; ".join(f"{PHRASES[verdict]} {', '.join(names)}" for verdict, names in verdicts.items())
                + "."
            )
    best = best_static(modes)
    ties = [
        _plain(k, modes)
        for k, e in modes.items()
        if e["mode"] == BASELINE and k != best and compare(modes[best], e, "speedup_measured") == "not distinguishable"
    ]
    if best is not None and ties:
        out.append(
            f"- The best static length ({_plain(best, modes)}, highest measured speedup) is not "
            f"distinguishable from {', '.join(ties)}."
        )
    return out


def pooled_modes(data, temperature: float, runs: dict | None = None) -> dict:
    """Per-label summaries over the runs of every suite at one temperature (`runs`: data.main, or
    data.trees for the chain-vs-tree runs)."""
    runs = data.main if runs is None else runs
    suites = [s for s in data.plan.suites if (s, temperature) in runs]
    results = [runs[(s, temperature)] for s in suites]
    if not results:
        return {}
    ar = [run for r in results for run in r.records.get(AR, [])] or None
    modes = {}
    for label in results[0].records:
        pooled = [run for r in results for run in r.records[label]]
        strata = [s for s, r in zip(suites, results) for _ in r.records[label]]
        modes[label] = mode_summary(pooled, ar, data.profile, strata)
        if "length" in results[0].summary["modes"][label]:
            modes[label]["length"] = results[0].summary["modes"][label]["length"]
    statics = [k for k, e in modes.items() if e["mode"] == BASELINE]
    if statics:
        best = max(statics, key=lambda k: modes[k]["tokens_per_s"] or 0.0)
        for k in statics:
            modes[k]["best"] = k == best
    return modes


def sweep_rows(data, kind: str) -> list[tuple[float, dict, dict]]:
    """(value, pooled LibraSpec summary, {suite: summary}) for each swept alpha or d_max (T = 0)."""
    plan = data.plan
    values = plan.alphas if kind == "alpha" else plan.d_maxes
    main_value = plan.alpha if kind == "alpha" else plan.d_max
    out = []
    for value in values:
        per_suite, runs, ar, strata = {}, [], [], []
        for suite in plan.suites:
            main = data.main.get((suite, 0.0))
            result = main if value == main_value else data.sweeps.get((suite, kind, value))
            if main is None or result is None or PAPER not in result.records:
                continue
            baseline = result.records.get(AR) or main.records.get(AR, [])  # AR timed beside it
            per_suite[suite] = mode_summary(result.records[PAPER], baseline, data.profile)
            runs += result.records[PAPER]
            ar += baseline
            strata += [suite] * len(result.records[PAPER])
        if runs:
            out.append((value, mode_summary(runs, ar or None, data.profile, strata), per_suite))
    return out


def acceptance_evidence(data, temperature: float = 0.0) -> pd.DataFrame:
    """The judged drafts of every policy mode at `temperature`, one row each (see module doc)."""
    records = [
        record
        for suite in data.plan.suites
        if (suite, temperature) in data.main
        for runs in data.main[(suite, temperature)].records.values()
        for run in runs
        for record in run
    ]
    return acceptance_samples(records, tested_only=True)


def _goal(ok: bool | None) -> str:
    return "n/a" if ok is None else ("**met**" if ok else "**not met**")


# each goal of `stats.GOALS` in words ({threshold}: its value, {against}: the label it is judged against)
GOAL_TEXTS = {
    "oracle_ratio": ("modeled speedup >= {threshold:.2f}x oracle's", "x"),
    "static_ratio": ("modeled speedup >= {threshold:.2f}x best static's ({against})", "x"),
    "mad": ("MAD to d* <= {threshold:.1f} tokens", "f"),
    "mad_ratio": ("MAD <= {threshold:g}x static's ({against})", "x"),
    "measured": ("measured speedup over AR >= {threshold:.1f}x", "x"),
    "policy_share": ("policy time <= {threshold:.0%} of round time", "%"),
}


def _goal_text(goal, modes: dict) -> str:
    return GOAL_TEXTS[goal.key][0].format(threshold=GOALS[goal.key], against=_plain(goal.against, modes))


def _goal_value(goal) -> str:
    return {"x": _x, "f": _f, "%": _pct}[GOAL_TEXTS[goal.key][1]](goal.value)


def goal_rows(modes: dict) -> list[list[str]]:
    """[goal, LibraSpec's figure, verdict] for each goal of the project (`stats.goals`)."""
    return [[_goal_text(g, modes), _goal_value(g), _goal(g.met)] for g in goals(modes)]


def _limits(data, pooled0: dict, samples: pd.DataFrame) -> list[str]:
    """Plain statements, each with its figure, about what bounds the speedup here.

    `samples`: the judged drafts (`acceptance_evidence`)."""
    profile, n = data.profile, data.profile.n
    ar = profile.ar_token_time()
    out = []
    by_position = acceptance_by_position(samples)
    rate = dict(zip(by_position["position"].tolist(), by_position["acceptance"].tolist()))
    if 1 in rate:
        later = [i for i in sorted({2, 4, 8, n}) if i in rate]
        tau = expected_tau_curve([rate.get(i, 0.0) for i in range(1, n + 1)], n)[-1]  # unseen positions: p = 0
        out.append(
            f"- **Drafter accuracy.** At temperature 0 draft 1 is accepted in {100 * rate[1]:.0f}% of "
            f"rounds"
            + (
                "; given every earlier draft was accepted, "
                + ", ".join(f"draft {i} in {100 * rate[i]:.0f}%" for i in later)
                if later
                else ""
            )
            + f". Under greedy verification tau = 1 + sum_i prod_(k<=i) p_k, so with these rates a "
            f"round at d = n commits about {tau:.2f} tokens on average."
        )
    if not samples.empty:
        ece = expected_calibration_error(samples["q"], samples["accepted"])
        q, accepted = samples["q"].mean(), samples["accepted"].mean()
        side = "over-confident" if q > accepted else "under-confident"
        out.append(
            f"- **Calibration.** Mean q_i of counted drafts is {q:.2f} against an acceptance rate of "
            f"{accepted:.2f} (expected calibration error {ece:.2f}): the drafter is {side}, so the eps_i "
            f"bounds, which read q_i as acceptance probabilities, "
            f"{'stretch d too far' if q > accepted else 'stop d too early'}."
        )
    even = profile.round_time(n) / ar
    lib = pooled0.get(PAPER)
    ks = sorted({2, 4, n + 1, data.plan.d_max + 1})
    out.append(
        "- **Cost curve.** On this machine a target forward over k new tokens costs "
        + ", ".join(f"{profile.verify_time(k) / ar:.2f}x (k = {k})" for k in ks)
        + f" one AR step; a round at d = n (drafting included) costs {even:.2f} AR "
        f"steps, so it must commit tau >= {even:.2f} tokens to break even"
        + (f"; LibraSpec's tau is {lib['tau']:.2f}." if lib else ".")
    )
    return out


def _paper_rows(data, pooled: dict) -> list[list[str]]:
    rows = []
    libs = [(s, t, r.summary["modes"][PAPER]) for (s, t), r in data.main.items() if PAPER in r.summary["modes"]]
    best = max(libs, key=lambda x: x[2]["speedup_measured"] or 0.0, default=None)
    if best:
        rows.append(
            [
                f"speedup over AR up to {REPORTED['speedup'].span()} (GPUs)",
                f"up to {_x(best[2]['speedup_measured'])} measured ({best[0]}, T={best[1]:g}), "
                f"{_x(max(x[2]['speedup_modeled'] or 0 for x in libs))} modeled",
                "CPU, 135M target, self-trained drafter: see the limits below",
            ]
        )
    for t, modes in pooled.items():
        if PAPER in modes and best_static(modes):
            s = modes[best_static(modes)]
            lib = modes[PAPER]
            gain_m = None if lib["speedup_measured"] is None else lib["speedup_measured"] - s["speedup_measured"]
            rows.append(
                [
                    f"+{REPORTED['gain'].span()} over baselines (T={t:g})",
                    f"{_x(gain_m, 2, 'x')} measured, {_x(lib['speedup_modeled'] - s['speedup_modeled'])} "
                    f"modeled over {_plain(best_static(modes), modes)}",
                    f"pooled over suites; LibraSpec against it: measured {compare(lib, s, 'speedup_measured')}, "
                    f"modeled {compare(lib, s, 'speedup_modeled')} (95% intervals)",
                ]
            )
    for kind, paper in (
        ("alpha", f"alpha {REPORTED['alpha'].span()} is robust"),
        ("d_max", f"d_max = {REPORTED['d_max_dflash'].span()} for DFlash"),
    ):
        sweep = sweep_rows(data, kind)
        if sweep:
            top = max(sweep, key=lambda x: x[1]["speedup_modeled"] or 0.0)
            spread = [x[1]["speedup_modeled"] for x in sweep]
            ties = [
                alpha_label(v) for v, p, _ in sweep if v != top[0] and compare(top[1], p, "speedup_modeled") != "faster"
            ]
            best = f"highest modeled speedup at {kind} = {alpha_label(top[0])} ({_x(top[1]['speedup_modeled'])}), " + (
                f"not distinguishable from {kind} = {', '.join(ties)}"
                if ties
                else "ahead of every other value beyond the 95% intervals"
            )
            rows.append([paper, f"{best}; range {_x(min(spread))}-{_x(max(spread))}", "T = 0, pooled over suites"])
    for t in data.plan.temperatures:
        trees = pooled_modes(data, t, data.trees)
        pairs = [  # each tree label and the tree it extends at the same budget (the registry's `beside`)
            (label, other_label)
            for label, e in trees.items()
            for other, other_label, _ in counterparts(label, e["mode"])
            if MODES[other].kind == "tree"
        ]
        if pairs:
            gains = [
                f"{_x(trees[lib]['speedup_measured'] - trees[dd]['speedup_measured'])} measured, "
                f"{_x(trees[lib]['speedup_modeled'] - trees[dd]['speedup_modeled'])} modeled ({dd}: "
                f"{compare(trees[lib], trees[dd], 'speedup_measured')})"
                for lib, dd in pairs
                if dd in trees
            ]
            rows.append(
                [
                    f"DDTree + LibraSpec: +{REPORTED['gain_ddtree_greedy'].span()} (greedy), "
                    f"+{REPORTED['gain_ddtree_sampling'].span()} (sampling) over DDTree (T={t:g})",
                    "; ".join(gains),
                    "pooled over suites, the chain-vs-tree runs; budgets as labelled",
                ]
            )
    if 0.0 in pooled and PAPER in pooled[0.0] and best_static(pooled[0.0]):
        modes = pooled[0.0]
        regime = modes[PAPER]["regime"] or {}
        rows.append(
            [
                f"MAD to oracle {REPORTED['mad_libraspec'].low:g} (LibraSpec) "
                f"vs {REPORTED['mad_static'].low:g} (static)",
                f"{_f(modes[PAPER]['mad_vs_oracle'])} vs {_f(modes[best_static(modes)]['mad_vs_oracle'])}",
                f"T = 0, best static, pooled; on LibraSpec's rounds constant d = 1 scores "
                f"{_f(regime.get('mad_constant_1'))} and static d = n {_f(regime.get('mad_static_n'))}: "
                f"a MAD means little unless it beats these",
            ]
        )
    return rows


def provenance_lines(data, config: dict) -> list[str]:
    """Setup lines on where the numbers came from: commit, file digests, load (bench's provenance)."""
    prov = config.get("provenance", {})
    dirty = {True: " with uncommitted changes (dirty tree)", False: " (clean tree)"}.get(prov.get("git_dirty"), "")
    out = [f"- Code: commit `{prov.get('git_commit') or 'unknown'}`{dirty}"]
    files = prov.get("files", [])
    out.append(
        "- Files (sha256): "
        + (
            "; ".join(f"{f['role']} `{f['path']}` {f['sha256']}" for f in files)
            if files
            else "none (random weights from a seed)"
        )
    )
    before, after = _loads(data)
    if before:
        out.append(
            f"- Load average (1 min) before the {len(before)} runs: {_span(before, '{:.2f}')}; "
            f"after them: {_span(after, '{:.2f}')} (this process's own threads included)"
        )
    shares = _shares(data)
    out.append(
        "- Share of the machine's CPU time other processes used during each run: "
        f"{_span([100 * s for s in shares], '{:.0f}')}%"
        if shares
        else "- Other processes' share of the CPU: not recorded"
    )
    return out


def _span(values, fmt: str) -> str:
    """'lo-hi' of the values as formatted, or the one value when both ends print the same."""
    lo, hi = fmt.format(min(values)), fmt.format(max(values))
    return lo if lo == hi else f"{lo}-{hi}"


def _provenances(data) -> list[dict]:
    """The provenance of every bench run of the report, main runs first."""
    return [r.summary["config"].get("provenance", {}) for r in list(data.main.values()) + list(data.sweeps.values())]


def _loads(data) -> tuple[list[float], list[float]]:
    """1-minute load averages before and after every bench run of the report (where recorded)."""
    loads = [p.get("load_1min", {}) for p in _provenances(data)]
    return (
        [x["before"] for x in loads if x.get("before") is not None],
        [x["after"] for x in loads if x.get("after") is not None],
    )


def _shares(data) -> list[float]:
    """The share of the CPU other processes used during every bench run of the report (where recorded)."""
    return [p["others_cpu_share"] for p in _provenances(data) if p.get("others_cpu_share") is not None]


def _sources(data) -> dict[str, str]:
    """suite -> the prompt file its main runs read (assets/prompts, written for this project, or a
    public set read at run time)."""
    return {
        suite: shown_path(result.summary["config"]["prompts"]) if result.summary["config"].get("prompts") else "?"
        for (suite, _), result in data.main.items()
    }


def busy_warning(data) -> list[str]:
    """A header paragraph when other processes took more than BUSY_SHARE of the CPU during any run."""
    shares = _shares(data)
    busy = sum(x > BUSY_SHARE for x in shares)
    if not busy:
        return []
    return [
        f"**Other processes competed for the CPU:** during {busy} of {len(shares)} runs they used more than "
        f"{BUSY_SHARE:.0%} of the machine's CPU time (up to {max(shares):.0%}), so measured times carry that "
        "load; modeled times do not.",
        "",
    ]


def render(pair, data, markdown_dir: str, default_plan) -> str:
    """The whole measured report (REPORT.md) as text; `default_plan` is the report's plan without `--quick`.
    Each section is a function of the report's data; the statistics come from the functions above."""
    plan = data.plan
    first = next(iter(data.main.values()), None)
    config = first.summary["config"] if first else {}
    pooled = {t: pooled_modes(data, t) for t in plan.temperatures}
    pooled_tag = sample_tag(plan, max((_prompts(m) for m in pooled.values() if m), default=0))
    lines = _head(data, default_plan) + busy_warning(data) + _setup(pair, data, config)
    lines += ["## Results per suite", ""]
    for suite in plan.suites:
        for t in plan.temperatures:
            lines += _suite_block(
                plan, data.main.get((suite, t)), f"{suite}, temperature {t:g}", _modes_table, comparisons
            )
    lines += ["## Pooled over suites", ""]
    for t, modes in pooled.items():
        if modes:
            lines += [f"### temperature {t:g}", ""] + _modes_table(modes, pooled_tag) + [""]
            lines += comparisons(modes) + [""]
    lines += tree_section(data)
    lines += _sensitivity(data, "alpha", "Alpha sensitivity (paper Table 4)")
    lines += _sensitivity(data, "d_max", "d_max sensitivity (paper Fig. 4)")
    lines += _trajectories(data)
    lines += regime_section(pooled, pooled_tag)
    lines += _mad_section(data.profile, pooled, pooled_tag)
    lines += (
        ["## Compared with the paper", ""]
        + _table(["paper", "here", "note"], _paper_rows(data, pooled), pooled_tag)
        + [""]
    )
    lines += _goals_section(pooled, pooled_tag)
    lines += _limits_section(data, pooled, pooled_tag)
    lines += _reproduce(data)
    return "\n".join(lines)


def _head(data, default_plan) -> list[str]:
    """The title and the run's provenance sentence."""
    plan = data.plan
    return [
        "# Benchmarks",
        "",
        f"{QUICK_NOTE if plan.quick else ''}"
        f"Generated {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC by `{data.command}` "
        f"in {data.elapsed_s / 60:.1f} min of decoding (estimated beforehand: "
        f"{data.estimate_s[0] / 60:.1f}-{data.estimate_s[1] / 60:.1f} min for tau = 3 to 1)"
        + (
            f"; {data.resumed} of its runs were read back from an earlier invocation of the same command "
            "(`--resume`: same code, files, profile, prompts and settings, checked by a job key)"
            if data.resumed
            else ""
        )
        + ". Every number "
        f"below comes from that run; nothing is copied from elsewhere. The default size (no `--quick`: "
        f"{default_plan.prompts_per_suite} prompts x {default_plan.max_new_tokens} tokens per suite, every "
        f"policy mode annotated) is estimated at {data.default_estimate_s[0] / 60:.0f}-"
        f"{data.default_estimate_s[1] / 60:.0f} min of decoding on this machine.",
        "",
    ]


def _knob_phrases(config: dict, d_max: int) -> list[str]:
    """ "; FailFast threshold 0.6, start and step 4" per label whose policy read a knob the line has
    not said (bench's config "settings"), each knob's name without the label's title, unset knobs
    (LibraSpec's start at n) left out; a label with its paper's settings (`Mode.published`) says them all."""
    said = {"d_max", "static_length"}  # the setup line's
    phrases = []
    for label, knobs in (config.get("settings") or {}).items():
        paper = label in PUBLISHED
        shown = {k: v for k, v in knobs.items() if v is not None and (paper or k not in said)}  # None: unset (n)
        if shown:
            title = label_title(label)
            mode = title.split(" (")[0] + " "  # "FailFast (paper)" names its knobs "FailFast ..."
            phrases.append(
                f"; {title} "
                + ", ".join(f"{NAMES[k].removeprefix(mode)} {v:g}" for k, v in shown.items())
                + (f" (its d* and MAD still look ahead d_max = {d_max} drafts)" if paper else "")
            )
    return phrases


def _setup(pair, data, config: dict) -> list[str]:
    """## Setup: machine, versions, provenance, the pair, the settings, the profile."""
    plan, profile = data.plan, data.profile
    machine, versions = config.get("machine", {}), config.get("versions", {})
    lines = [
        "## Setup",
        "",
        f"- Machine: {machine.get('cpu', '?')}, {config.get('threads', '?')} torch thread(s)"
        + (f", GPU {machine['gpu']}" if "gpu" in machine else ", no GPU"),
        "- Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()),
    ]
    lines += provenance_lines(data, config)
    lines += [
        f"- Model pair `{pair.name}`: {pair.description}; target `{config.get('models', {}).get('target', '?')}`, "
        f"drafter `{pair.drafter_id}`, n = {pair.n}",
        f"- LibraSpec alpha = {plan.alpha:g}, d_max = {plan.d_max}; static lengths "
        f"{', '.join(map(str, plan.lengths(pair.n)))}" + "".join(_knob_phrases(config, plan.d_max)),
        f"- Suites {', '.join(f'{suite} (`{source}`)' for suite, source in _sources(data).items())}: first "
        f"{plan.prompts_per_suite} prompts each, {plan.max_new_tokens} new tokens, temperatures "
        f"{', '.join(f'{t:g}' for t in plan.temperatures)}, seed {plan.seed} (+ prompt index)",
        "- Measured time: drafting + policy + verification wall clock (prefill excluded); modeled time: the "
        "latency profile below applied to each round. Speedup = AR seconds per token / mode seconds per token, "
        "totals over prompts, AR decoded in the same run. MAD = mean |d - d*| over a mode's own rounds, "
        "d* from an untimed oracle look-ahead of d_max drafts.",
        f"- Intervals: 95% percentile bootstrap over prompts ({config.get('bootstrap', {}).get('resamples', '?')} "
        "resamples of the prompts, ratio of sums, mode and AR paired by prompt). Where two modes' intervals "
        "overlap they are reported as not distinguishable.",
    ]
    if data.note:
        lines.append(f"- Note: {data.note}")
    verify = ", ".join(
        f"k={k}: {1000 * profile.verify_time(k):.0f} ms" for k in (1, 2, 4, 8, 16, 25) if k <= len(profile.verify_s)
    )
    drafts = ", ".join(f"{b}: {1000 * t:.0f} ms" for b, t in enumerate(profile.draft_s, start=1))
    lines += [
        "",
        f"Latency profile (median of {profile.meta.get('repeats', '?')} repeats, context "
        f"{profile.meta.get('context_len', '?')}): target forward with {verify}; "
        f"drafting blocks {drafts}.",
        "",
    ]
    if "profile" in data.figures:
        lines += [_figure("latency profile", data.figures["profile"]), ""]
    return lines + [data.figure_note, ""]


def _sensitivity(data, kind: str, title: str) -> list[str]:
    """An alpha or d_max sweep of LibraSpec, pooled over suites."""
    plan = data.plan
    rows = sweep_rows(data, kind)
    lines = [
        f"## {title}",
        "",
        "LibraSpec at temperature 0, "
        + (f"d_max = {plan.d_max}" if kind == "alpha" else f"alpha = {plan.alpha:g}")
        + "; speedups pooled over suites with 95% intervals over prompts (per-suite modeled speedups "
        "after them).",
        "",
    ]
    header = [kind, "speedup measured [95% CI]", "speedup modeled [95% CI]", "tau", "mean d"] + [
        f"{s} modeled" for s in plan.suites
    ]
    lines += _table(
        header,
        [
            [
                alpha_label(v),
                speedup_text(p["speedup_measured"], p["speedup_measured_ci"]),
                speedup_text(p["speedup_modeled"], p["speedup_modeled_ci"]),
                _f(p["tau"]),
                _f(p["mean_length"], 1),
            ]
            + [_x(per[s]["speedup_modeled"]) if s in per else "-" for s in plan.suites]
            for v, p, per in rows
        ],
        sample_tag(plan, max((p["prompts"] for _, p, _ in rows), default=0)),
    ) + [""]
    return lines


def _trajectories(data) -> list[str]:
    """The chosen-length figures, one per suite."""
    plan = data.plan
    lines = [
        "## Length trajectories",
        "",
        "Chosen d per round on the first prompt of each suite at temperature 0, for the best static length, "
        "LibraSpec and the oracle; dashed lines are the oracle d* of the same round.",
        "",
    ]
    for suite in plan.suites:
        if f"trajectory-{suite}" in data.figures:
            lines += [_figure(f"{suite} trajectory", data.figures[f"trajectory-{suite}"]), ""]
    return lines


def _mad_section(profile, pooled: dict, pooled_tag: str) -> list[str]:
    """MAD to d* beside the MAD of trivial schedules on the same rounds."""
    lines = [
        "## MAD to the oracle length",
        "",
        f"The paper reports {REPORTED['mad_libraspec'].span()} for LibraSpec against "
        f"{REPORTED['mad_static'].span()} for static lengths ({REPORTED['mad_static'].where}). "
        f"A MAD means something only beside the MAD of trivial "
        f"schedules on the same rounds: constant d = 1 and static d = n = {profile.n}.",
        "",
    ]
    mad_rows = []
    for t, modes in pooled.items():
        for label in [k for k, e in modes.items() if e["mad_vs_oracle"] is not None]:
            regime = modes[label]["regime"]
            mad_rows.append(
                [
                    f"{t:g}",
                    _label_name(label, modes[label]),
                    _f(modes[label]["mad_vs_oracle"]),
                    _f(regime["mad_constant_1"]),
                    _f(regime["mad_static_n"]),
                    _f(modes[label]["mean_length"], 1),
                ]
            )
    lines += _table(
        ["temperature", "mode", "MAD to d*", "constant d = 1", f"static d = {profile.n}", "mean d"],
        mad_rows,
        pooled_tag,
    ) + [""]
    return lines


def goal_verdicts(pooled: dict) -> tuple[list[float], list[list[str]]]:
    """(temperatures, one row per goal: its name, its value at each temperature, the verdict): a goal
    is met when it holds at every temperature, n/a when it applies at none (`stats.goal_met`)."""
    by_t = {t: (judged, m) for t, m in pooled.items() if m and (judged := goals(m))}
    if not by_t:
        return [], []
    temps = list(by_t)
    first, modes = by_t[temps[0]]
    rows = []
    for i, goal in enumerate(first):
        cells = [by_t[t][0][i] for t in temps]
        rows.append(
            [_goal_text(goal, modes)] + [_goal_value(c) for c in cells] + [_goal(goal_met([c.met for c in cells]))]
        )
    return temps, rows


def _goals_section(pooled: dict, pooled_tag: str) -> list[str]:
    lines = ["## Goals", "", "LibraSpec pooled over suites; a goal is met when it holds at every temperature.", ""]
    temps, rows = goal_verdicts(pooled)
    if rows:
        lines += _table(["goal"] + [f"T={t:g}" for t in temps] + ["verdict"], rows, pooled_tag) + [""]
    return lines


def _limits_section(data, pooled: dict, pooled_tag: str) -> list[str]:
    """What limits the speedup, then acceptance by position and the calibration of q_i."""
    samples = acceptance_evidence(data)
    lines = ["## What limits the speedup", ""] + _limits(data, pooled.get(0.0, {}), samples) + [""]
    if not samples.empty:
        by_position = acceptance_by_position(samples)
        table = reliability_table(samples["q"], samples["accepted"])
        lines += [
            "Acceptance by draft position (temperature 0, policy modes; a draft counts when it was "
            "submitted and every earlier draft was accepted):",
            "",
        ]
        lines += _table(
            ["position i", "rounds", "accepted"],
            [[str(i), str(c), f"{100 * r:.1f}%"] for i, c, r, _ in by_position.itertuples(index=False)],
            pooled_tag,
        ) + [""]
        lines += ["Calibration of q_i on the same drafts:", ""]
        lines += _table(
            ["q_i bin", "drafts", "mean q_i", "accepted"],
            [
                [f"{lo:.1f}-{hi:.1f}", str(c), f"{q:.2f}", f"{r:.2f}"]
                for lo, hi, c, q, r in table.itertuples(index=False)
                if c
            ],
            pooled_tag,
        )
        lines += [""]
    return lines


def _reproduce(data) -> list[str]:
    return (
        [
            "## Reproduce",
            "",
            "The whole report:",
            "",
            "```",
            data.command,
            "```",
            "",
            "Each main run on its own (the report wrote these files; per-round records sit beside each JSON "
            "as `.records.parquet`):",
            "",
            "```",
        ]
        + data.bench_commands
        + ["```", ""]
    )


def _suite_block(plan, result, title: str, table, notes) -> list[str]:
    """One suite's table (`table(modes, tag)`) under a heading, and the sentences `notes(modes)`."""
    if result is None:
        return []
    modes = result.summary["modes"]
    return [f"### {title}", ""] + table(modes, sample_tag(plan, _prompts(modes))) + [""] + notes(modes) + [""]


def _tree_table(modes: dict, tag: str) -> list[str]:
    chain = modes.get(BASELINE, {}).get("tau")
    header = [
        "mode",
        "speedup measured [95% CI]",
        "speedup modeled [95% CI]",
        "tau",
        "tau / chain's",
        "mean depth",
        "mean nodes",
        "tokens",
    ]
    rows = [
        [
            label_title(label),
            speedup_text(e["speedup_measured"], e["speedup_measured_ci"]),
            speedup_text(e["speedup_modeled"], e["speedup_modeled_ci"]),
            _f(e["tau"]),
            _x(e["tau"] / chain) if chain and e["mode"] != AR else "-",
            _f(e["mean_length"], 1),
            _f(e.get("mean_tree_size"), 1),
            str(e["tokens"]),
        ]
        for label, e in modes.items()
    ]
    return _table(header, rows, tag)


def counterparts(label: str, mode: str) -> list[tuple[str, str, str]]:
    """(mode, label, words) of each mode the registry sets `mode` beside (`Mode.beside`): a tree at
    the same node budget (its label with the mode's name swapped), or a chain (its own label)."""
    out = []
    for other in MODES[mode].beside:
        if MODES[other].kind == "tree":
            out.append((other, label.replace(mode, other, 1), f"{MODES[other].label} at the same budget"))
        else:
            words = "the chain (static d = n)" if other == BASELINE else f"{MODES[other].title} on the chain"
            out.append((other, other, words))
    return out


def tree_comparisons(modes: dict) -> list[str]:
    """Each tree label against the modes the registry sets it beside (the chain of its depth, static
    d = n; the tree it extends at the same node budget; LibraSpec on the chain), by the overlap of
    their 95% intervals."""
    out = []
    for label, e in modes.items():
        for _, other, name in counterparts(label, e["mode"]):
            if other in modes:
                verdicts = [
                    f"{what} {PHRASES[compare(e, modes[other], key)]} {name}"
                    for key, what in (("speedup_measured", "measured"), ("speedup_modeled", "modeled"))
                ]
                out.append(f"- {label_title(label)}: " + "; ".join(verdicts) + ".")
    return out


def tree_section(data) -> list[str]:
    """Chains against draft trees on the tree drafter (paper Table 2, its DDTree half)."""
    if not data.trees:
        return []
    plan = data.plan
    first = next(iter(data.trees.values())).summary["config"]
    lines = [
        "## Chains and draft trees (paper Table 2, DDTree half)",
        "",
        f"One run per suite and temperature with the `{first['models']['drafter']}` drafter: AR, the chain "
        f"static d = n = {first['n']}, LibraSpec on the chain, ddtree (depth n, node budgets "
        f"{', '.join(map(str, first['node_budgets']))}) and ddtree-libraspec (Algorithm 1 picks the depth "
        "from the tree's per-depth confidences, the tree fills the budget within it), none annotated. A tree's "
        "verification costs the latency profile's verification of nodes + 1 tokens: wider trees accept more "
        "per round but each verified row costs time, which on a CPU is far from free.",
        "",
    ]
    for t in plan.temperatures:
        for suite in plan.suites:
            lines += _suite_block(
                plan, data.trees.get((suite, t)), f"{suite}, temperature {t:g} (trees)", _tree_table, tree_comparisons
            )
        pooled = pooled_modes(data, t, data.trees)
        if pooled:
            lines += [f"### pooled over suites, temperature {t:g} (trees)", ""]
            lines += _tree_table(pooled, sample_tag(plan, _prompts(pooled))) + [""] + tree_comparisons(pooled) + [""]
    return lines


def _prompts(modes: dict) -> int:
    """The number of prompts behind a table of modes."""
    return max(e.get("prompts", 0) for e in modes.values())


def regime_section(pooled: dict, tag: str) -> list[str]:
    """The oracle d* per policy mode (histogram) and how often Algorithm 1 moved d (stats.regime_stats)."""
    lines = [
        "## Regime of the rounds",
        "",
        "The oracle's d* in hindsight over each policy mode's own rounds (rounds with the untimed annotation), "
        "and how LibraSpec's Algorithm 1 moved d: shares of rounds that extend d, roll back below the d "
        "reached, draft a further block, and where d_max bound (an extension capped at d_max).",
        "",
    ]
    hist, moves = [], []
    for t, modes in pooled.items():
        for label, e in modes.items():
            regime = e.get("regime")
            if regime is None:
                continue
            if regime["judged"]:
                hist.append(
                    [f"{t:g}", _plain(label, modes), str(regime["judged"])]
                    + [str(regime["dstar_histogram"][name]) for name, _, _ in DSTAR_BINS]
                )
            if e["mode"] == PAPER:
                moves.append(
                    [f"{t:g}", str(regime["rounds"])]
                    + [_pct(regime[k]) for k in ("extends", "rolls_back", "further_block", "d_max_bound", "ar_steps")]
                    + [str(regime["max_d"])]
                )
    if hist:
        lines += _table(
            ["temperature", "mode", "rounds with d*"] + [f"d* = {name}" for name, _, _ in DSTAR_BINS], hist, tag
        ) + [""]
    if moves:
        lines += _table(
            [
                "temperature",
                "LibraSpec rounds",
                "extends",
                "rolls back",
                "further block",
                "d_max bound",
                "AR steps",
                "max d",
            ],
            moves,
            tag,
        ) + [""]
    return lines


def _figure(alt: str, path: str) -> str:
    return f"![{alt}]({path})" if path.endswith(".png") else f"[{alt} (interactive HTML)]({path})"
