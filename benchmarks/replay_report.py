"""BENCHMARKS.md from replay: the grids priced from draft traces, and a measured check.

    python benchmarks/replay_report.py                 # default size; resumes from its cache
    python benchmarks/replay_report.py --quick --out /tmp/BENCHMARKS.md

1. Traces: the first --limit prompts of GSM8K, HumanEval, MATH-500 and MT-Bench (../shared/data,
   read at run time), --max-new-tokens tokens of greedy AR text each, and for every drafter what
   it proposes from every position of that text (`analysis.trace`), --lookahead drafts deep and
   (block diffusion) 64 candidates wide for trees. Cached per prompt under the cache folder: a
   rerun resumes.
2. Grids (`experiments.grids`): every static length 1..2n and 24, LibraSpec over alpha (and
   automatic) and over d_max, G4, both FailFasts, the per-round oracle, the best schedule in
   hindsight and (block diffusion) trees at node budgets 16/32/64, replayed under three latency
   profiles: (a) this machine at batch 1, measured; (b) groups of 8 requests of a suite in
   lock-step (all of a suite's when --limit is smaller), forwards measured at that batch; (d) a
   synthetic steep profile (a verified token costs 1/8 of an AR step). Modeled, never timed.
   LibraSpec against the engines' rules (`grids.engine_grid`: every chain rule of the registry, the
   online-q rows, the static lengths): batch 1 and steep from the grids above, and lock-step groups
   of 2, 4 and 8 requests priced padded and ragged; paired ratios of LibraSpec (the paper's alpha and
   priced) over each engine rule and the best static length; the issue's goal checked cell by cell.
3. Measured check: the first --measured prompts of each suite decoded for real with the block
   drafter (AR, the best static length of grid (a), LibraSpec, the oracle) at temperature 0 and 1,
   and every serving engine's rule and LibraSpec priced at temperature 0;
   measured against modeled speedup with intervals, and at temperature 0 the share of rounds the
   replay reproduced exactly. Cached per prompt too.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import multiprocessing
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from libraspec.analysis.regimes import describe, synthetic_profile  # noqa: E402
from libraspec.analysis.replay import replay, rounds_reproduced  # noqa: E402
from libraspec.analysis.trace import DraftTrace, record_trace  # noqa: E402
from libraspec.engine import DecodeConfig, SpeculativeDecoder  # noqa: E402
from libraspec.experiments import grids, stats  # noqa: E402
from libraspec.experiments.provenance import (  # noqa: E402
    cpu_clock,
    git_state,
    load_average,
    model_files,
    others_share,
    versions,
)
from libraspec.experiments.report_md import speedup_text  # noqa: E402
from libraspec.experiments.stats import distinguishable, per_prompt, pooled_speedup, speedup_interval  # noqa: E402
from libraspec.group import BATCHINGS, PADDED  # noqa: E402
from libraspec.models.registry import load_pair  # noqa: E402
from libraspec.modes import ENGINE, MODES, PAPER  # noqa: E402
from libraspec.paths import (
    cache_root,  # noqa: E402
    read_prompts,  # noqa: E402
)
from libraspec.profiling import cached_concurrency, cached_profile, machine_description  # noqa: E402
from libraspec.serving.vllm import load_schedule  # noqa: E402
from libraspec.spec import RunSpec

SUITES = {
    "gsm8k": "gsm8k_test.jsonl",
    "humaneval": "humaneval.jsonl",
    "math500": "math500.jsonl",
    "mtbench": "mt_bench_questions.jsonl",
}
DRAFTERS = ("dflash", "lookup", "hybrid")
LOCKSTEP_B = 8
TREE_TOP_K = 64
PROFILE_KEYS = ("a", "b", "d")


def arguments():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=16, help="prompts per suite in the grids")
    parser.add_argument("--measured", type=int, default=4, help="prompts per suite decoded for the measured check")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--lookahead", type=int, default=63, help="drafts traced per position (d_max up to 60)")
    parser.add_argument("--drafters", default=",".join(DRAFTERS))
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=2, help="drafters replayed at once (worker processes)")
    parser.add_argument("--out", default=str(ROOT / "BENCHMARKS.md"))
    parser.add_argument("--results", default=str(ROOT / "benchmarks" / "results" / "replay"))
    parser.add_argument("--quick", action="store_true", help="2 prompts per suite, 1 measured, 32 tokens")
    args = parser.parse_args()
    if args.quick:
        args.limit, args.measured, args.max_new_tokens = 2, 1, 32
    return args


def folder(args, pair) -> Path:
    key = f"{pair.name}-{pair.drafter_id[:16]}-{args.max_new_tokens}-{args.lookahead}".replace(":", "")
    path = Path(cache_root()) / "replay_report" / key
    path.mkdir(parents=True, exist_ok=True)
    return path


def traces_for(args, pair, cache: Path) -> dict[str, list[tuple[str, DraftTrace]]]:
    """drafter -> [(suite, trace)] in suite order; recorded once, then read from the cache."""
    decoder = SpeculativeDecoder(pair, drafter="dflash")
    out = {d: [] for d in args.drafters.split(",")}
    for suite, file in SUITES.items():
        for i, text in enumerate(read_prompts(Path(args.data) / file)[: args.limit]):
            paths = {d: cache / f"{suite}-{i:02d}-{d}.npz" for d in out}
            missing = [d for d, p in paths.items() if not p.exists()]
            if missing:
                prompt = pair.encode_prompt(text)
                config = DecodeConfig.of(RunSpec(max_new_tokens=args.max_new_tokens))
                start = time.perf_counter()
                output = [t for r in decoder.run(prompt, "ar", None, config) for t in r.committed_tokens]
                ar_s = time.perf_counter() - start
                for d in missing:
                    top_k = TREE_TOP_K if d == "dflash" else 1
                    trace = record_trace(
                        pair, d, prompt, output, args.max_new_tokens, args.lookahead, top_k, {"ar_s": ar_s}
                    )
                    trace.save(paths[d])
                print(f"traced {suite} {i} ({', '.join(missing)})", flush=True)
            for d, p in paths.items():
                out[d].append((suite, DraftTrace.load(p)))
    return out


def drafter_grids(job) -> tuple:
    """One drafter's grids, engines' section and ratios, in a worker process (`--jobs`): the traces
    are read from their cache files there; only the summaries come back."""
    drafter, files, profiles, concurrency, n, B, limit = job
    torch.set_num_threads(1)
    traces = {drafter: [(suite, DraftTrace.load(path)) for suite, path in files]}
    results, kept = grid_results(traces, profiles, concurrency, n, B)
    engines, rows_by = engine_results(traces, kept, concurrency, n, B, limit)
    return drafter, results[drafter], engines[drafter], engine_ratios(engines, rows_by, traces)[drafter]


def all_grids(args, traces, cache: Path, profiles, concurrency, n: int) -> tuple[dict, dict, dict]:
    """`drafter_grids` for every drafter, --jobs at a time (modeled replay: nothing is timed, so the
    workers may share the machine); returns (grids, engines, ratios) by drafter in --drafters order."""
    jobs = []
    for drafter, items in traces.items():
        files = [(suite, cache / f"{suite}-{i:02d}-{drafter}.npz") for suite, i in trace_index(items)]
        jobs.append((drafter, files, profiles, concurrency, n, group_size(args), args.limit))
    if args.jobs > 1:
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(args.jobs, mp_context=context) as pool:
            done = {out[0]: out for out in pool.map(drafter_grids, jobs)}
    else:
        done = {out[0]: out for out in map(drafter_grids, jobs)}
    order = list(traces)
    return tuple({d: done[d][part] for d in order} for part in (1, 2, 3))


def trace_index(items) -> list[tuple[str, int]]:
    """(suite, index within the suite) of each trace, as `traces_for` names their cache files."""
    seen: dict[str, int] = {}
    out = []
    for suite, _ in items:
        out.append((suite, seen.get(suite, 0)))
        seen[suite] = seen.get(suite, 0) + 1
    return out


def group_size(args) -> int:
    """Requests per lock-step group: LOCKSTEP_B, or a whole suite when --limit is smaller."""
    return min(args.limit, LOCKSTEP_B)


def suite_groups(items, B: int) -> list[list[DraftTrace]]:
    """Each suite's traces in lock-step groups of up to B requests, in suite order."""
    strata = [suite for suite, _ in items]
    groups = []
    for suite in dict.fromkeys(strata):
        mine = [t for s, t in items if s == suite]
        groups += [mine[k : k + B] for k in range(0, len(mine), B)]
    return groups


def grid_results(traces, profiles, concurrency, n: int, B: int) -> tuple[dict, dict]:
    """(drafter -> profile key -> label -> summary (plus each config's mode); lock-step groups of B,
    drafter -> profile key -> label -> the per-prompt (per-group) rows, kept for paired ratios)."""
    results, kept = {}, {}
    for drafter, items in traces.items():
        strata = [suite for suite, _ in items]
        just = [t for _, t in items]
        groups = suite_groups(items, B)
        configs = grids.chain_grid(n) + (grids.tree_grid() if drafter == "dflash" else [])
        results[drafter] = {key: {} for key in PROFILE_KEYS}
        kept[drafter] = {key: {} for key in PROFILE_KEYS}
        for config in configs:
            for key in ("a", "d"):
                rows = kept[drafter][key][config.label] = grids.replay_rows(just, config, profiles[key])
                results[drafter][key][config.label] = grids.summarize(rows, strata) | {"mode": config.mode}
            if config.mode not in (grids.BEST,) and not config.alpha_auto:
                rows = kept[drafter]["b"][config.label] = grids.lockstep_rows(groups, config, concurrency)
                results[drafter]["b"][config.label] = grids.summarize(rows) | {"mode": config.mode, "groups": len(rows)}
        print(f"grids {drafter}: {len(configs)} configurations", flush=True)
    return results, kept


# ---- LibraSpec against the engines' rules -------------------------------------------------------

ENGINE_B = (2, 4, LOCKSTEP_B)  # lock-step group sizes
BEST_STATIC = "best static"
PRICED = "libraspec-priced"  # the registry's name of LibraSpec priced (the subject beside the paper's alpha)


def regimes(limit: int = 16) -> list[tuple[str, str]]:
    """(key, words) of every regime the engines' section replays: batch 1, lock-step padded and ragged
    at each group size of ENGINE_B that `limit` prompts per suite can fill, steep."""
    B_values = sorted({min(B, limit) for B in ENGINE_B})
    out = [("a", "(a) batch 1")]
    out += [(f"b{B} {batching}", f"B={B} {batching}") for B in B_values for batching in BATCHINGS]
    return out + [("d", "(d) steep")]


def engine_results(traces, kept, concurrency, n: int, main_B: int, limit: int) -> tuple[dict, dict]:
    """Every row of `grids.engine_grid` in lock-step groups of each ENGINE_B, padded and ragged (batch 1
    and steep are the chain grid's, and so is padded at the chain grid's group size main_B); returns
    (drafter -> regime -> label -> summary, drafter -> regime -> label -> rows)."""
    results, rows_by = {}, {}
    for drafter, items in traces.items():
        strata = [suite for suite, _ in items]
        configs = grids.engine_grid(n)
        results[drafter], rows_by[drafter] = {}, {}
        for key, _ in regimes(limit):
            results[drafter][key], rows_by[drafter][key] = {}, {}
            if key in ("a", "d"):
                for config in configs + [grids.Config(grids.BEST, grids.BEST)]:
                    rows = kept[drafter][key][config.label]
                    rows_by[drafter][key][config.label] = rows
                    results[drafter][key][config.label] = grids.summarize(rows, strata) | {"mode": config.mode}
                continue
            B, batching = int(key.split()[0][1:]), key.split()[1]
            groups = suite_groups(items, B)
            for config in configs:
                if B == main_B and batching == PADDED and config.label in kept[drafter]["b"]:
                    rows = kept[drafter]["b"][config.label]  # the chain grid's (b): the same replay
                else:
                    rows = grids.lockstep_rows(groups, config, concurrency, batching)
                rows_by[drafter][key][config.label] = rows
                results[drafter][key][config.label] = grids.summarize(rows) | {"mode": config.mode, "groups": len(rows)}
        print(f"engines {drafter}: {len(configs)} configurations x {len(regimes(limit))} regimes", flush=True)
    return results, rows_by


def engine_ratios(results, rows_by, traces) -> dict:
    """drafter -> regime -> "A / B" -> paired ratio of A's modeled speed over B's [95%], A being LibraSpec
    at the paper's alpha and priced, B each engine rule and the regime's best static length."""
    out = {}
    for drafter, by_regime in results.items():
        strata = [suite for suite, _ in traces[drafter]]
        out[drafter] = {}
        for key, summaries in by_regime.items():
            rows = rows_by[drafter][key]
            others = {grids.rule_label(m): grids.rule_label(m) for m in MODES if MODES[m].role == ENGINE}
            others[BEST_STATIC] = best_static(summaries)  # each regime against its own best static length
            ratios = {}
            paired = strata if key in ("a", "d") else None  # lock-step groups: over the groups, as (b)
            for subject in (grids.rule_label(PAPER), grids.rule_label(PRICED)):
                for name, other in others.items():
                    ratios[f"{subject} / {name}"] = grids.paired_ratio(rows[subject], rows[other], paired)
            out[drafter][key] = ratios
    return out


def best_static(summaries: dict) -> str | None:
    return stats.best_static(summaries, "speedup")


def measured_check(args, pair, cache: Path, static_d: int) -> list[dict]:
    """Per prompt and temperature: per_prompt rows of each mode (measured and modeled), and at
    temperature 0 how many rounds the replay of the same prompt reproduced."""
    decoder = SpeculativeDecoder(pair, drafter="dflash")
    profile = decoder.profile
    settings, _ = RunSpec(static_length=static_d).checked(pair.n)
    modes = {"static": f"static d={static_d}", "libraspec": "LibraSpec", "oracle": "oracle"}
    # the serving engines' rules and LibraSpec priced: at temperature 0, where replay must match round for round
    greedy_only = {m: MODES[m].label for m in MODES if MODES[m].role == ENGINE or m == PRICED}
    out = []
    for suite, file in SUITES.items():
        for i, text in enumerate(read_prompts(Path(args.data) / file)[: args.measured]):
            for temperature in (0.0, 1.0):
                path = cache / f"measured-{suite}-{i:02d}-T{temperature:g}-d{static_d}-v2.json"  # v2: engine rules
                if path.exists():
                    out.append(json.loads(path.read_text()))
                    continue
                prompt = pair.encode_prompt(text)
                config = DecodeConfig.of(RunSpec(max_new_tokens=args.max_new_tokens, temperature=temperature, seed=i))
                ar = list(decoder.run(prompt, "ar", None, config))
                row = {"suite": suite, "prompt": i, "temperature": temperature, "modes": {}}
                trace = DraftTrace.load(cache / f"{suite}-{i:02d}-dflash.npz") if temperature == 0 else None
                for mode, label in (modes | greedy_only if temperature == 0 else modes).items():
                    records = list(decoder.run(prompt, mode, MODES[mode].policy(settings, profile), config))
                    entry = per_prompt([records], [ar])[0]
                    if trace is not None:
                        replayed = replay(trace, mode, profile, settings)
                        same = rounds_reproduced(records, replayed)
                        entry |= {"rounds": len(records), "equal_rounds": same, "replay_rounds": len(replayed)}
                        entry["replay_modeled_s"] = replayed[-1].cumulative_modeled_s
                    row["modes"][label] = entry
                path.write_text(json.dumps(row))
                out.append(row)
                print(f"measured {suite} {i} T={temperature:g}", flush=True)
    return out


def measured_summary(rows: list[dict]) -> dict:
    summary = {}
    for temperature in (0.0, 1.0):
        mine = [r for r in rows if r["temperature"] == temperature]
        strata = [r["suite"] for r in mine]
        for label in mine[0]["modes"] if mine else ():
            entries = [r["modes"][label] for r in mine]
            item = {
                "prompts": len(entries),
                "measured": pooled_speedup(entries, "wall_s"),
                "measured_interval": speedup_interval(entries, "wall_s", strata=strata),
                "modeled": pooled_speedup(entries, "modeled_s"),
                "modeled_interval": speedup_interval(entries, "modeled_s", strata=strata),
            }
            if temperature == 0:
                item["equal_rounds"] = sum(e["equal_rounds"] for e in entries)
                item["rounds"] = sum(max(e["rounds"], e["replay_rounds"]) for e in entries)
                # the replay's modeled seconds of the same text, against AR's modeled seconds
                replayed = [{**e, "modeled_s": e["replay_modeled_s"]} for e in entries]
                item["replay_modeled"] = pooled_speedup(replayed, "modeled_s")
            summary[f"T={temperature:g} {label}"] = item
    return summary


# ---- markdown ----------------------------------------------------------------------------------


def _ci(summary: dict) -> str:
    return speedup_text(summary["speedup"], summary.get("interval"))


def render(args, pair, profiles, concurrency, results, engines, ratios, measured, meta) -> str:
    n, B = pair.n, group_size(args)
    words = {
        "a": describe(profiles["a"]),
        "b": describe(concurrency[B])
        if B in concurrency
        else f"{B} requests in lock-step (forwards interpolated between batch sizes {sorted(concurrency)})",
        "d": describe(profiles["d"]),
    }
    lines = [
        "# Benchmarks",
        "",
        f"Generated {meta['date']} by `{meta['command']}` in {meta['minutes']:.1f} min on this machine "
        f"({meta['machine']}, {args.threads} torch threads, no GPU). Load average (1 min) before: "
        f"{meta['load_before']:.2f}, after: {meta['load_after']:.2f} (this run's own threads included); other "
        f"processes' share of the CPU during the run: {meta['others_share']:.1%}. "
        f"Code: commit `{meta['git']['commit']}`"
        f"{' with uncommitted changes' if meta['git']['dirty'] else ' (no uncommitted changes to tracked files)'}.",
        "",
        "Two kinds of numbers, never mixed: **modeled** figures replay the target's greedy text "
        "(`analysis.replay`: the engine's own rounds, verified against the known text) and price every "
        "round with a latency profile; **measured** figures time real decoding on this machine "
        "(drafting + policy + verification wall clock, prefill excluded). Speedups are AR's seconds per "
        "token over a mode's, as ratios of sums over prompts; intervals are 95% percentile bootstraps over "
        "prompts (2,000 resamples), stratified by suite. Overlapping intervals are reported as not "
        "distinguishable; configurations whose rounds made identical decisions on every prompt are one tie.",
        "",
        "## Sample and conditions",
        "",
        f"- Pair `{pair.name}`, n = {n}; files (sha256): "
        + "; ".join(f"{f['role']} `{f['path']}` {f['sha256'][:16]}" for f in meta["files"]),
        f"- Suites (../shared/data, read at run time): {', '.join(SUITES)}; grids on the first {args.limit} "
        f"prompts of each ({args.limit * len(SUITES)} prompts), {args.max_new_tokens} greedy tokens each; "
        f"traces {args.lookahead} drafts deep, block-diffusion traces {TREE_TOP_K} candidates wide.",
        f"- Profiles: (a) {words['a']}; (b) {words['b']}: requests of a suite replayed in groups of "
        f"up to {B} in lock-step, each choosing its own length (intervals over the groups); "
        f"(d) {words['d']}. Forwards beyond the measured token counts continue the last measured segment.",
        "- Trace cost: " + "; ".join(f"{d} {meta['trace_cost'][d]}" for d in meta["trace_cost"]) + ".",
        "",
        "## Where the length choice matters",
        "",
        "Modeled speedup over AR on the same prompts, per drafter and profile; the best schedule is the "
        "sequence of lengths that minimises the modeled time of each text in hindsight (the limit of any "
        "chain length policy with that drafter and profile; not computed for lock-step groups). "
        "LibraSpec is alpha = 2.2, d_max = 24.",
        "",
        "| drafter | profile | best static | LibraSpec | oracle d* per round | best schedule | "
        "LibraSpec / best static | LibraSpec / best schedule |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for drafter, by_profile in results.items():
        for key in PROFILE_KEYS:
            s = by_profile[key]
            static = best_static(s)
            lib = s["LibraSpec alpha=2.2"]
            best = s.get(grids.BEST)
            verdict = distinguishable(lib.get("interval"), s[static].get("interval"))
            lines.append(
                f"| {drafter} | ({key}) | {static}: {_ci(s[static])} | {_ci(lib)} | {_ci(s['oracle d* per round'])} "
                f"| {_ci(best) if best else '-'} | {grids.share(lib, s[static]):.1%}"
                f"{'' if verdict else ' (no interval)' if verdict is None else ' (not distinguishable)'} | "
                f"{f'{grids.share(lib, best):.1%}' if best else '-'} |"
            )
    lines += ["", *takeaways(results), ""]
    lines += engines_section(engines, ratios, args, meta["schedule"])
    if "dflash" in results:
        lines += trees_table(results["dflash"], B)
    for drafter, by_profile in results.items():
        lines += [f"## Grid: {drafter} drafter", ""]
        lines += grid_table(by_profile, args, B)
        lines.append("")
    lines += ["## Measured check (block-diffusion drafter)", ""]
    lines += measured_table(measured, args)
    lines += ["", *kept_table1(Path(args.out))]
    lines += [
        "## Reproduce",
        "",
        f"`{meta['command']}` (traces and measured runs are cached per prompt under "
        "`~/.cache/libraspec/replay_report/`; a rerun resumes). The replay's exactness against the engine: "
        "`benchmarks/results/replay_check/` (`python benchmarks/replay_check.py`). Per-configuration numbers: "
        f"`{Path(args.results).relative_to(ROOT) if Path(args.results).is_relative_to(ROOT) else args.results}"
        "/grids.json`. The paper's Table 1 rows with the single-pass and the iterative (Fast-dLLM-style) "
        "block drafter and the EAGLE-3-style head, and the paper's claims on them: `benchmarks/results/table1/` "
        "(`python benchmarks/table1.py`; CLAIMS.md there).",
        "",
    ]
    return "\n".join(lines)


def kept_table1(path: Path) -> list[str]:
    """The Table 1 section benchmarks/table1.py wrote into `path` (between its markers), kept as it is:
    this report does not record the iterative drafter's and the head's traces."""
    from table1 import MARKERS

    text = path.read_text() if path.exists() else ""
    if MARKERS[0] not in text or MARKERS[1] not in text:
        return []
    kept = text.split(MARKERS[0], 1)[1].split(MARKERS[1], 1)[0]
    return [MARKERS[0] + kept + MARKERS[1], ""]


ENGINE_ROWS_NOTE = (
    "LibraSpec priced: the marginal criterion at the price list's alpha = V / c for one request at batch 1, "
    "and over the whole group in lock-step, the group's round priced as the regime charges it (padded or "
    "ragged; `group.PricedGroup`); vLLM adaptive: the global draft budget of vLLM's adaptive verification "
    "(PRs #47808, #52228) for one request at batch 1 and over the whole group in lock-step; vLLM schedule: "
    "one K per batch-size range (PR #32374; its table chosen on held-apart prompts, "
    "assets/batch_schedule.json); SGLang adaptive: the EMA of accepted lengths picking the next step count "
    "from SGLang's tiers; transformers threshold: drafting stops at the first q_i below the threshold, "
    "re-fitted from the ROC of earlier rounds; + online q: the rule reads q_i through vLLM's online "
    'logistic calibration (docs/ARCHITECTURE.md, "The engines\' rules").'
)


def goal_lines(engines, ratios, args) -> list[str]:
    """The issue's goal, checked cell by cell: LibraSpec priced not distinguishably slower than vLLM
    adaptive and the best static length (paired ratio interval reaching 1 or above), and at least 90% of
    the best schedule at batch 1 and steep."""
    priced = grids.rule_label(PRICED)
    short, cells = [], 0
    for drafter, by_regime in ratios.items():
        for key, words in regimes(args.limit):
            pairs = by_regime[key]
            for other in (MODES["vllm-adaptive"].label, BEST_STATIC):
                cells += 1
                r = pairs[f"{priced} / {other}"]
                high = r["interval"][1] if r["interval"] else r["ratio"]
                if high < 1:
                    short.append(f"{drafter} {words}: {r['ratio']:.2f}x of {other} [{_interval(r)}]")
            best = engines[drafter][key].get(grids.BEST)
            if best is not None:
                cells += 1
                share = grids.share(engines[drafter][key][priced], best)
                if share < 0.9:
                    short.append(f"{drafter} {words}: {share:.1%} of the best schedule")
    head = "- Goal (LibraSpec priced at least as fast as vLLM adaptive and the best static length in every regime, "
    head += f">= 90% of the best schedule at (a) and (d)): {cells - len(short)} of {cells} cells hold."
    return [head] + ([f"  Falls short: {'; '.join(short)}."] if short else [])


def _interval(r: dict) -> str:
    return f"{r['interval'][0]:.2f}-{r['interval'][1]:.2f}" if r["interval"] else "no interval"


def engines_section(engines, ratios, args, schedule: dict) -> list[str]:
    """Every engine rule x drafter x regime: modeled speedup [95%], share of the best schedule where
    it exists, and paired ratios of LibraSpec (paper alpha, priced) over each engine rule."""
    keys = regimes(args.limit)
    lines = [
        "## LibraSpec against the engines' rules",
        "",
        "Modeled replay: every rule decides on the same drafts and is priced by the same profiles. Regimes: "
        "(a) batch 1; lock-step groups of B requests of a suite (B = "
        + ", ".join(key.split()[0][1:] for key, _ in keys if key.endswith(PADDED))
        + "), "
        "their forward priced **padded** (every request pays the longest request's rows) or **ragged** (the "
        "group's total verified tokens, as engines that flatten the batch do), both from forwards measured "
        "here at those batch sizes (intervals over the groups); (d) steep. " + ENGINE_ROWS_NOTE,
        "",
        f"vLLM schedule's table: {json.dumps(schedule['ranges'])} ([first B, last B, K]), {schedule['chosen_on']}",
        "",
    ]
    head = "| rule | " + " | ".join(words for _, words in keys) + " | share of best (a) | share of best (d) |"
    for drafter, by_regime in engines.items():
        lines += [f"**{drafter} drafter**: modeled speedup over AR [95%]", "", head]
        lines.append("|---" * (len(keys) + 3) + "|")
        labels = [
            label for label in by_regime["a"] if label != grids.BEST and by_regime["a"][label]["mode"] != "static"
        ]
        statics = {key: best_static(by_regime[key]) for key, _ in keys}
        rows = [
            ("best static (" + ", ".join(sorted({statics[k].split("=")[1] for k, _ in keys}, key=int)) + ")", statics)
        ]
        rows += [(label, {key: label for key, _ in keys}) for label in labels]
        for name, per_key in rows:
            cells = [_ci(by_regime[key][per_key[key]]) for key, _ in keys]
            shares = []
            for key in ("a", "d"):
                best = by_regime[key].get(grids.BEST)
                shares.append(f"{grids.share(by_regime[key][per_key[key]], best):.1%}" if best else "-")
            lines.append(f"| {name} | " + " | ".join(cells) + " | " + " | ".join(shares) + " |")
        best_cells = [_ci(by_regime[key][grids.BEST]) if grids.BEST in by_regime[key] else "-" for key, _ in keys]
        lines += ["| best schedule (hindsight) | " + " | ".join(best_cells) + " | 100% | 100% |", ""]
        lines += [
            f"**{drafter} drafter**: paired ratio of modeled speed [95%] (above 1: the first is faster)",
            "",
            "| ratio | " + " | ".join(words for _, words in keys) + " |",
            "|---" * (len(keys) + 1) + "|",
        ]
        for name in ratios[drafter]["a"]:
            cells = [ratios[drafter][key][name] for key, _ in keys]
            lines.append(f"| {name} | " + " | ".join(f"{r['ratio']:.2f} [{_interval(r)}]" for r in cells) + " |")
        lines.append("")
    lines += goal_lines(engines, ratios, args)
    return lines + [""]


def takeaways(results) -> list[str]:
    out = []
    for drafter, by_profile in results.items():
        parts = []
        for key in PROFILE_KEYS:
            s = by_profile[key]
            static, lib = best_static(s), s["LibraSpec alpha=2.2"]
            best = s.get(grids.BEST)
            gap = f", best schedule {speedup_text(best['speedup'])}" if best else ""
            versus = f"{static} {speedup_text(s[static]['speedup'])}"
            parts.append(f"({key}) LibraSpec {speedup_text(lib['speedup'])} vs {versus}{gap}")
        out.append(f"- {drafter}: " + "; ".join(parts) + ".")
    return out


TREE_ROWS = (
    "LibraSpec alpha=2.2",
    "ddtree nodes=16",
    "ddtree nodes=32",
    "ddtree nodes=64",
    "ddtree-libraspec nodes=32",
    "ddtree-marginal nodes=32",
    "ddtree-priced nodes=16",
    "ddtree-priced nodes=32",
    "ddtree-priced nodes=64",
)


def trees_table(by_profile: dict, B: int) -> list[str]:
    """Chain LibraSpec, fixed-budget trees and the trees that choose their nodes, under each profile."""
    lines = [
        "## Trees that pay (block-diffusion drafter)",
        "",
        "Chain LibraSpec against trees: ddtree fills a fixed node budget at depth n, ddtree-libraspec at "
        "Algorithm 1's depth; ddtree-marginal adds nodes while alpha * P >= 1 (alpha 2.2, P a node's path "
        "probability); ddtree-priced while P * V >= dT (V the modeled seconds per committed token so far, "
        "dT the profile's price of the node's row: the budget is a cap). Modeled speedup over AR [95%] and "
        "mean drafts verified per round (a tree's nodes, a chain's d) under each profile.",
        "",
        f"| configuration | (a) batch 1 | nodes (a) | (b) lock-step {B} | nodes (b) | (d) steep | nodes (d) |",
        "|---|---|---|---|---|---|---|",
    ]

    def nodes(summary):
        return "-" if not summary or summary.get("mean_nodes") is None else f"{summary['mean_nodes']:.1f}"

    for label in TREE_ROWS:
        a, b, d = (by_profile[key].get(label) for key in PROFILE_KEYS)
        if a is None:
            continue
        lines.append(
            f"| {label} | {_ci(a)} | {nodes(a)} | {_ci(b) if b else '-'} | {nodes(b)} | {_ci(d)} | {nodes(d)} |"
        )
    lines.append("")
    for key in PROFILE_KEYS:
        s = by_profile[key]
        priced, chain = s.get("ddtree-priced nodes=32"), s.get("LibraSpec alpha=2.2")
        if not priced or not chain:
            continue
        best_fixed = max((label for label in s if label.startswith("ddtree nodes=")), key=lambda k: s[k]["speedup"])
        verdicts = []
        for name, other in (("chain LibraSpec", chain), (best_fixed, s[best_fixed])):
            apart = distinguishable(priced.get("interval"), other.get("interval"))
            verdicts.append(
                f"{grids.share(priced, other):.1%} of {name}'s speed"
                + ("" if apart else " (intervals overlap: not distinguishable)" if apart is False else "")
            )
        lines.append(f"- ({key}) ddtree-priced nodes=32: " + "; ".join(verdicts) + ".")
    return lines + [""]


def grid_table(by_profile: dict, args, B: int) -> list[str]:
    tied = {key: grids.ties(by_profile[key]) for key in ("a", "d")}
    lines = [
        f"{args.limit * len(SUITES)} prompts x {args.max_new_tokens} tokens, greedy; modeled speedup over AR "
        "[95% interval] under each profile; tau and mean d under (a).",
        "",
        f"| configuration | (a) batch 1 | (b) lock-step {B} | (d) steep | tau (a) | mean d (a) |",
        "|---|---|---|---|---|---|",
    ]
    for label, a in by_profile["a"].items():
        b, d = by_profile["b"].get(label), by_profile["d"][label]
        note = f" (same decisions as {tied['a'][label]})" if label in tied["a"] else ""
        tau = "-" if a["tau"] is None else f"{a['tau']:.2f}"
        mean_d = "-" if a["mean_d"] is None else f"{a['mean_d']:.1f}"
        lines.append(f"| {label}{note} | {_ci(a)} | {_ci(b) if b else '-'} | {_ci(d)} | {tau} | {mean_d} |")
    return lines


def measured_table(summary: dict, args) -> list[str]:
    lines = [
        f"First {args.measured} prompts of each suite ({args.measured * len(SUITES)} prompts), "
        f"{args.max_new_tokens} tokens, AR decoded beside each mode on the same prompt; temperature 1 "
        "uses seed = prompt index. At temperature 0 the replay of the same prompt is compared round by round "
        "(d, accepted, committed tokens).",
        "",
        "| temperature, mode | measured [95%] | modeled from its records [95%] | modeled by replay "
        "| rounds the replay reproduced |",
        "|---|---|---|---|---|",
    ]
    for label, s in summary.items():
        equal = f"{s['equal_rounds']}/{s['rounds']}" if "rounds" in s else "- (sampled text is not fixed)"
        measured, modeled = (
            speedup_text(s["measured"], s["measured_interval"]),
            speedup_text(s["modeled"], s["modeled_interval"]),
        )
        lines.append(f"| {label} | {measured} | {modeled} | {speedup_text(s.get('replay_modeled'))} | {equal} |")
    return lines


def main() -> None:
    args = arguments()
    torch.set_num_threads(args.threads)
    started, load_before, clock_before = time.perf_counter(), load_average(), cpu_clock()
    schedule = load_schedule()
    if schedule.get("chosen_on", "").startswith("QUICK PROVISIONAL") and not args.quick:
        raise SystemExit(
            "assets/batch_schedule.json holds a provisional quick table: run python benchmarks/batch_schedule.py first"
        )
    pair = load_pair()
    cache = folder(args, pair)
    profile = cached_profile(pair, max_tokens=args.lookahead + 2, max_blocks=-(-args.lookahead // pair.n))
    concurrency = cached_concurrency(pair, batches=(1,) + ENGINE_B)
    t0 = profile.ar_token_time()
    steep = dataclasses.replace(
        synthetic_profile(t0, t0 / 8, profile.draft_s[0], pair.n, args.lookahead + 2),
        lookup_s=profile.lookup_s,
        fit_s=profile.fit_s,
    )
    profiles = {"a": profile, "d": steep}
    traces = traces_for(args, pair, cache)
    results, engines, ratios = all_grids(args, traces, cache, profiles, concurrency, pair.n)
    static_d = int(best_static(results["dflash"]["a"]).split("=")[1]) if "dflash" in results else pair.n
    measured = measured_summary(measured_check(args, pair, cache, static_d))
    trace_cost = {}
    for drafter, items in traces.items():
        per_token = np.mean([t.meta["seconds"] / len(t.output) for _, t in items])
        ar = np.mean([t.meta["ar_s"] / len(t.output) for _, t in items])
        trace_cost[drafter] = f"{per_token * 1e3:.1f} ms per token traced against {ar * 1e3:.1f} ms per AR token"
    meta = {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python benchmarks/replay_report.py " + " ".join(sys.argv[1:]),
        "minutes": (time.perf_counter() - started) / 60,
        "machine": machine_description().get("cpu", "?"),
        "load_before": load_before,
        "load_after": load_average(),
        "others_share": others_share(clock_before, cpu_clock()),
        "git": git_state(),
        "files": model_files(pair, "dflash"),
        "trace_cost": trace_cost,
        "schedule": {key: schedule[key] for key in ("ranges", "chosen_on")},
        "versions": versions(),
    }
    out = Path(args.results)
    out.mkdir(parents=True, exist_ok=True)
    payload = {
        "meta": meta,
        "grids": results,
        "engines": engines,
        "engine_ratios": ratios,
        "measured": measured,
        "args": vars(args),
    }
    (out / "grids.json").write_text(json.dumps(payload, indent=1, default=float) + "\n")
    # the profiles every modeled figure came from (tests/test_cost.py checks every stored profile)
    profile.to_json(str(out / "profile.json"))
    lockstep = {str(B): p.to_dict() for B, p in concurrency.items()}
    (out / "concurrency.json").write_text(json.dumps(lockstep, indent=1) + "\n")
    Path(args.out).write_text(render(args, pair, profiles, concurrency, results, engines, ratios, measured, meta))
    print(f"wrote {args.out} in {meta['minutes']:.1f} min", flush=True)


if __name__ == "__main__":
    main()
