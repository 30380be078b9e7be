"""Chains against draft trees on public prompts: `python benchmarks/trees.py`.

For each suite (the first K prompts of GSM8K, HumanEval and MT-Bench first turns, read at run
time from ../shared/data and never copied into the repository) one `bench` run with the
block-diffusion drafter decodes AR, static d = n (the chain at the tree's depth), LibraSpec on
the chain, ddtree (depth n) and ddtree-libraspec (Algorithm 1 picks the depth) at every node
budget of --node-budget, interleaved prompt by prompt. No mode is oracle-annotated unless
--annotate asks (then all are), so every mode is timed under the same conditions. Writes one
JSON per suite under benchmarks/results/trees/ and a Markdown table: tau, tau over the chain's
at the same depth, mean depth and nodes, measured and modeled speedups over AR with 95%
bootstrap intervals over prompts, and the verification's measured and modeled milliseconds per
round (the cost of a wider verification). The latency profile is measured afresh once at the
start (and replaces the cached one). Run it on an otherwise idle machine: the table lists the
share of the CPU other processes used during each run (provenance).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from drafters import SUITES, add_run_arguments, publish  # noqa: E402  (benchmarks/drafters.py)

from libraspec.cost import LatencyProfile  # noqa: E402
from libraspec.experiments.bench import (
    ANNOTATED_MODES,
    BenchSpec,
    records_path,  # noqa: E402
    run_bench,
    write_result,
)
from libraspec.experiments.report_md import speedup_text  # noqa: E402
from libraspec.experiments.stats import speedup_interval  # noqa: E402
from libraspec.models.registry import load_pair  # noqa: E402
from libraspec.paths import read_prompts  # noqa: E402
from libraspec.profiling import cached_profile  # noqa: E402
from libraspec.records import read_trace  # noqa: E402

MODES = ("ar", "static", "libraspec", "ddtree", "ddtree-libraspec")  # --modes; static: the chain at the tree's depth


def run_suite(pair, suite: str, file: str, args, profile: LatencyProfile) -> None:
    out = Path(args.out) / f"{suite}.json"
    if out.exists() and not args.force:
        return
    prompts = read_prompts(Path(args.data) / file)[: args.prompts]
    modes = tuple(args.modes.split(","))
    spec = BenchSpec(
        modes=modes,
        max_new_tokens=args.max_new_tokens,
        alpha=args.alpha,
        d_max=args.d_max,
        annotate=tuple(m for m in modes if m in ANNOTATED_MODES) if args.annotate else False,
        drafter=args.drafters,
        node_budgets=tuple(int(b) for b in args.node_budget.split(",")),
    )
    write_result(run_bench(pair, prompts, spec, profile=profile, source=f"{file} (first {args.prompts})"), out)


def _ci(entry: dict, key: str) -> str:
    return speedup_text(entry[key], entry[f"{key}_ci"])


def rows(path: Path) -> list[dict]:
    """One row per label of a suite's run: its summary, and from its records the verification's
    measured and modeled milliseconds per round."""
    summary = json.loads(path.read_text())
    frame = read_trace(records_path(path))
    profile = LatencyProfile.from_dict(summary["config"]["profile"])
    chain_tau = summary["modes"]["static"]["tau"]
    out = []
    for label, entry in summary["modes"].items():
        mine = frame[frame["label"] == label]
        nodes = mine["tree_size"].where(mine["tree_size"] > 0, mine["chosen_length"])
        modeled = [
            profile.ar_token_time()
            if label == "ar"
            else profile.tree_verify_time(k + 1)
            if tree
            else profile.verify_time(k + 1)
            for k, tree in zip(nodes, mine["tree_size"] > 0)
        ]
        out.append(
            {
                "suite": path.stem,
                "label": label,
                "entry": entry,
                "tau_vs_chain": entry["tau"] / chain_tau if label != "ar" else None,
                "verify_ms": 1e3 * float(mine["verify_s"].mean()),
                "verify_model_ms": 1e3 * sum(modeled) / len(modeled),
                "config": summary["config"],
            }
        )
    return out


def table(args) -> str:
    found = [Path(args.out) / f"{suite}.json" for suite in SUITES if (Path(args.out) / f"{suite}.json").exists()]
    if not found:
        raise SystemExit(f"no run files in {args.out}: run without --table-only first")
    all_rows = [r for path in found for r in rows(path)]
    config = all_rows[0]["config"]
    others = [r["config"].get("provenance", {}).get("others_cpu_share") for r in all_rows]
    others = [x for x in others if x is not None]
    lines = [
        f"# Chains and draft trees on public prompts ({config['num_prompts']} per suite, "
        f"{config['max_new_tokens']} tokens, greedy, block-diffusion drafter)",
        "",
        f"Embedded pair, n = {config['n']}, LibraSpec alpha = {config['alpha']:g}, d_max = {config['d_max']}; "
        f"ddtree's depth is n; node budgets {', '.join(str(b) for b in config.get('node_budgets', []))}; "
        f"{config['threads']} thread(s) on {config['machine']['cpu']}. "
        + (
            f"Other processes used {100 * min(others):.0f}-{100 * max(others):.0f}% of the machine's CPU "
            "during the runs. "
            if others
            else ""
        )
        + "AR is decoded beside every mode on each prompt. Speedups: AR seconds per token over the mode's, "
        "95% bootstrap intervals over prompts in brackets. Verification ms per round: measured wall "
        "clock of the verifying forward and acceptance, and the latency profile's time for the same "
        "number of rows (a tree verification of nodes + 1 rows; a profile measured before trees were "
        "timed gives a chain forward of as many tokens).",
        "Command: `python benchmarks/trees.py " + " ".join(sys.argv[1:]) + "`",
        "",
        "| suite | mode | tau | tau / chain's | mean depth | mean nodes | measured | modeled | "
        "verify ms measured | verify ms modeled |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    pooled: dict[str, list[float]] = {}
    for r in all_rows:
        e = r["entry"]
        lines.append(
            f"| {r['suite']} | {r['label']} | {e['tau']:.2f} | "
            + (f"{r['tau_vs_chain']:.2f}x" if r["tau_vs_chain"] else "")
            + " | "
            + (f"{e['mean_length']:.1f}" if e["mean_length"] is not None else "")
            + " | "
            + (f"{e['mean_tree_size']:.1f}" if e.get("mean_tree_size") is not None else "")
            + " | "
            + f"{_ci(e, 'speedup_measured')} | {_ci(e, 'speedup_modeled')} | {r['verify_ms']:.1f} | "
            f"{r['verify_model_ms']:.1f} |"
        )
        acc = pooled.setdefault(r["label"], [0.0, 0.0, 0, 0])
        acc[0] += e["wall_s"]
        acc[1] += e["modeled_s"]
        acc[2] += e["tokens"]
        acc[3] += e["rounds"]
    ar = pooled["ar"]
    lines += [
        "",
        "Pooled over suites (totals): speedup = AR seconds per token / mode seconds per token.",
        "",
        "| mode | tau | tau / chain's | measured | modeled |",
        "|---|---|---|---|---|",
    ]
    chain_tau = pooled["static"][2] / pooled["static"][3]
    for label, (wall, modeled, tokens, rounds) in pooled.items():
        if label == "ar":
            continue
        tau = tokens / rounds
        lines.append(
            f"| {label} | {tau:.2f} | {tau / chain_tau:.2f}x | {(ar[0] / ar[2]) / (wall / tokens):.2f}x | "
            f"{(ar[1] / ar[2]) / (modeled / tokens):.2f}x |"
        )
    lines += ["", *paired_table(found)]
    return "\n".join(lines) + "\n"


def prompt_rows(found: list[Path]) -> tuple[dict[str, list[dict]], list[str]]:
    """label -> one row per prompt (suite after suite: tokens, measured and modeled seconds), and
    each prompt's suite (the bootstrap's strata)."""
    out: dict[str, list[dict]] = {}
    strata: list[str] = []
    for path in found:
        frame = read_trace(records_path(path))
        sums = frame.groupby(["label", "prompt_index"])[["tau", "measured_s", "modeled_s"]].sum()
        prompts = sorted(frame["prompt_index"].unique())
        strata += [path.stem] * len(prompts)
        for label in dict.fromkeys(frame["label"]):
            for index in prompts:
                row = sums.loc[(label, index)]
                out.setdefault(label, []).append(
                    {
                        "tokens": int(row["tau"]),
                        "wall_s": float(row["measured_s"]),
                        "modeled_s": float(row["modeled_s"]),
                    }
                )
    return out, strata


def paired_table(found: list[Path]) -> list[str]:
    """Each mode against chain LibraSpec and against every other tree mode, measured on the same
    prompts: the ratio of seconds per token, 95% bootstrap over prompts stratified by suite."""
    rows, strata = prompt_rows(found)
    trees = [label for label in rows if label.startswith("ddtree")]
    rivals = [label for label in ("libraspec",) if label in rows] + trees
    lines = [
        "Paired, measured: the row's speed over the column's (their seconds per token, ratio of sums over "
        "the same prompts), 95% bootstrap interval over prompts stratified by suite; > 1 means the row is "
        "faster. An interval that holds 1 is not a difference.",
        "",
        "| mode | " + " | ".join(f"vs {r}" for r in rivals) + " |",
        "|---|" + "---|" * len(rivals),
    ]
    for label in trees:
        cells = []
        for rival in rivals:
            if rival == label:
                cells.append("-")
                continue
            paired = [
                a | {"ar_tokens": b["tokens"], "ar_wall_s": b["wall_s"]} for a, b in zip(rows[label], rows[rival])
            ]
            ratio = (sum(b["wall_s"] for b in rows[rival]) / sum(b["tokens"] for b in rows[rival])) / (
                sum(a["wall_s"] for a in rows[label]) / sum(a["tokens"] for a in rows[label])
            )
            interval = speedup_interval(paired, "wall_s", strata=strata)
            cells.append(f"{ratio:.3f}" + (f" [{interval[0]:.3f}-{interval[1]:.3f}]" if interval else ""))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_arguments(parser, prompts=8, max_new_tokens=128)
    parser.set_defaults(alpha=2.2, d_max=24, drafters="dflash")  # the paper's DDTree + LibraSpec setting
    parser.add_argument("--suites", default=",".join(SUITES))
    parser.add_argument("--modes", default=",".join(MODES), help="comma list (ar and static are needed)")
    parser.add_argument("--node-budget", default="16,32", help="comma list of tree node budgets")
    parser.add_argument("--annotate", action="store_true", help="oracle-annotate every policy and tree mode")
    parser.add_argument("--table-only", action="store_true", help="only rebuild README.md from the results")
    parser.add_argument("--force", action="store_true", help="decode again runs whose results exist")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "trees"))
    args = parser.parse_args()
    if "," in args.drafters:
        raise SystemExit("--drafters: one drafter (trees need per-position candidates: dflash)")
    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    if not args.table_only:
        pair = load_pair()
        budgets = [int(b) for b in args.node_budget.split(",")]
        longest = max(budgets + [args.d_max]) + 1  # one fresh profile (and cache file) for every suite
        profile = cached_profile(pair, max_tokens=longest, max_blocks=max(2, -(-args.d_max // pair.n)), refresh=True)
        for suite in args.suites.split(","):
            run_suite(pair, suite, SUITES[suite], args, profile)
    publish(args.out, table(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
