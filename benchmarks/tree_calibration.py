"""Draft-tree path probabilities against acceptance: fitted on held-apart prompts, checked on the suites.

    python benchmarks/tree_calibration.py    # after benchmarks/trees.py and benchmarks/replay_report.py

1. Fit: the first --prompts prompts of each of the app's own prompt sets (assets/prompts/*.jsonl,
   written for this project, never a benchmark suite) decoded greedily in ddtree mode (depth n,
   --node-budget nodes: fixed trees, so nodes of every path probability are verified); their node
   samples (`analysis.tree_calibration`) give reliability and ECE by depth and the power gamma of
   the correction P -> P^gamma.
2. Check: the same tables for the public suites' ddtree nodes of the measured tree run
   (--trees, benchmarks/results/trees_priced/*.records.parquet), before and after P^gamma with the
   gamma fitted in 1 (nothing is fitted on the suites).
3. What the correction would change: ddtree-priced reading P^gamma instead of P, replayed (modeled)
   from the block-diffusion traces in benchmarks/replay_report.py's cache under this machine's
   batch-1 profile, beside ddtree-priced as it is. A what-if: no mode reads P^gamma.
Writes --out/README.md and --out/results.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import pandas as pd
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from libraspec.analysis.replay import ReplayDecoder  # noqa: E402
from libraspec.analysis.trace import DraftTrace  # noqa: E402
from libraspec.analysis.tree_calibration import by_depth, fit_power, node_samples  # noqa: E402
from libraspec.cost import ar_text_s  # noqa: E402
from libraspec.engine import DecodeConfig, SpeculativeDecoder  # noqa: E402
from libraspec.experiments import grids  # noqa: E402
from libraspec.experiments.provenance import git_state, load_average  # noqa: E402
from libraspec.files import atomic_write_text  # noqa: E402
from libraspec.models.registry import load_pair  # noqa: E402
from libraspec.modes import make_policy  # noqa: E402
from libraspec.paths import (
    cache_root,  # noqa: E402
    read_prompts,  # noqa: E402
)
from libraspec.profiling import cached_profile  # noqa: E402
from libraspec.records import read_trace  # noqa: E402
from libraspec.spec import RunSpec
from libraspec.tree_policy import PricedTreePolicy  # noqa: E402

HELD_APART = sorted((ROOT / "assets" / "prompts").glob("*.jsonl"))


class CalibratedPricedTree(PricedTreePolicy):
    """ddtree-priced reading the corrected path probability P^gamma (a what-if of this script)."""

    def __init__(self, profile, d_max: int, node_cap: int, gamma: float):
        super().__init__(profile, d_max, node_cap)
        self.gamma = float(gamma)

    def pays(self, j: int, path_prob: float) -> bool:
        return super().pays(j, path_prob**self.gamma)


def fit_samples(pair, profile, args) -> pd.DataFrame:
    decoder = SpeculativeDecoder(pair, profile, drafter="dflash")
    frames = []
    for path in HELD_APART:
        for i, text in enumerate(read_prompts(path)[: args.prompts]):
            config = DecodeConfig.of(RunSpec(max_new_tokens=args.max_new_tokens))
            policy = make_policy("ddtree", pair.n, tree_depth=pair.n, node_budget=args.node_budget)
            records = list(decoder.run(pair.encode_prompt(text), "ddtree", policy, config))
            frames.append(node_samples(records).assign(source=f"{path.stem}-{i}"))
            print(f"held-apart {path.stem} {i}: {len(frames[-1])} nodes", flush=True)
    return pd.concat(frames, ignore_index=True)


def suite_samples(args) -> pd.DataFrame:
    frames = []
    for path in sorted(Path(args.trees).glob("*.records.parquet")):
        frame = read_trace(str(path))
        mine = frame[frame["label"] == f"ddtree-b{args.node_budget}"]
        frames.append(node_samples(mine).assign(source=path.name.split(".")[0]))
    samples = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if samples.empty:
        raise SystemExit(f"no ddtree-b{args.node_budget} nodes in {args.trees}: run benchmarks/trees.py first")
    return samples


def replayed(profile, gamma: float, args) -> dict:
    """ddtree-priced as it is and reading P^gamma, replayed from the cached block-diffusion traces."""
    paths = sorted(Path(cache_root(), "replay_report").glob("*/*-dflash.npz"))
    if not paths:
        raise SystemExit("no block-diffusion traces: run benchmarks/replay_report.py first")
    traces = [DraftTrace.load(p) for p in paths]
    strata = [p.name.split("-")[0] for p in paths]
    settings, _ = RunSpec(node_budget=32).checked(traces[0].n)
    out = {}
    for label, make in (
        ("ddtree-priced", lambda: PricedTreePolicy(profile, settings.d_max, settings.node_budget)),
        (
            f"ddtree-priced reading P^{gamma:.2f}",
            lambda: CalibratedPricedTree(profile, settings.d_max, settings.node_budget, gamma),
        ),
    ):
        rows = []
        for trace in traces:
            decoder = ReplayDecoder.from_trace(trace, profile)
            config = DecodeConfig.of(RunSpec(max_new_tokens=trace.max_new_tokens))
            records = list(decoder.run(list(trace.prompt), "ddtree-priced", make(), config))
            rows.append(
                {
                    "tokens": len(trace.output),
                    "modeled_s": records[-1].cumulative_modeled_s,
                    "ar_tokens": len(trace.output),
                    "ar_modeled_s": ar_text_s(profile, len(trace.prompt), len(trace.output)),
                    "rounds": len(records),
                    "sum_d": sum(r.chosen_length for r in records),
                    "sum_nodes": sum(r.tree_size for r in records),
                    "digest": grids.decision_digest(records),
                }
            )
        out[label] = grids.summarize(rows, strata)
    return out | {"prompts": len(traces)}


def table(frame: pd.DataFrame, after: pd.DataFrame | None = None) -> list[str]:
    lines = ["| depth | nodes | mean P | on the accepted path | ECE | ECE of P^gamma |", "|---|---|---|---|---|---|"]
    for k, row in frame.iterrows():
        fixed = "-" if after is None else f"{after['ece'].iloc[k]:.3f}"
        lines.append(
            f"| {row['depth']} | {row['nodes']} | {row['mean_p']:.3f} | {row['on_path']:.3f} | {row['ece']:.3f} "
            f"| {fixed} |"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=6, help="held-apart prompts per prompt set")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--node-budget", type=int, default=64)
    parser.add_argument("--trees", default=str(ROOT / "benchmarks" / "results" / "trees_priced"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "tree_calibration"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    started, load_before = time.perf_counter(), load_average()
    pair = load_pair()
    profile = cached_profile(pair)
    fit = fit_samples(pair, profile, args)
    gamma = fit_power(fit)
    suites = suite_samples(args)
    what_if = replayed(profile, gamma, args)
    results = {
        "gamma": gamma,
        "fit": by_depth(fit).to_dict(orient="records"),
        "fit_after": by_depth(fit, gamma).to_dict(orient="records"),
        "suites": by_depth(suites).to_dict(orient="records"),
        "suites_after": by_depth(suites, gamma).to_dict(orient="records"),
        "replay": what_if,
        "args": vars(args),
        "git": git_state(),
        "load_1min": {"before": load_before, "after": load_average()},
        "minutes": (time.perf_counter() - started) / 60,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(str(out / "results.json"), json.dumps(results, indent=1, default=float) + "\n")
    lines = [
        "# Draft-tree path probabilities against acceptance",
        "",
        f"`python benchmarks/tree_calibration.py {' '.join(sys.argv[1:])}`, {results['minutes']:.1f} min, "
        f"load average before {load_before:.2f}; commit `{results['git']['commit']}`"
        f"{' (uncommitted changes)' if results['git']['dirty'] else ''}. Block-diffusion drafter, greedy; a "
        "node's path probability P is the product of the drafter's q along its root path; it lies on the "
        "accepted path when the target's tokens follow it (`libraspec.analysis.tree_calibration`). ECE: 10 "
        "equal-width bins of P, weighted by count.",
        "",
        f"## Fit: held-apart prompts ({args.prompts} of each of {', '.join(p.stem for p in HELD_APART)}, "
        f"{args.max_new_tokens} tokens, ddtree depth n, {args.node_budget} nodes)",
        "",
        f"Power correction P -> P^gamma by least log loss: **gamma = {gamma:.2f}** "
        f"({'P under-confident' if gamma < 1 else 'P over-confident' if gamma > 1 else 'no correction'}).",
        "",
        *table(by_depth(fit), by_depth(fit, gamma)),
        "",
        f"## Check: the public suites' ddtree nodes ({args.node_budget} nodes) of the measured tree run "
        f"(`{Path(args.trees).relative_to(ROOT) if Path(args.trees).is_relative_to(ROOT) else args.trees}`)",
        "",
        *table(by_depth(suites), by_depth(suites, gamma)),
        "",
        "## What reading P^gamma would change (modeled replay, batch-1 profile of this machine)",
        "",
        f"{what_if['prompts']} block-diffusion traces of benchmarks/replay_report.py, 95% bootstrap over prompts.",
        "",
        "| policy | speedup over AR | tau | nodes per round |",
        "|---|---|---|---|",
    ]
    for label, s in what_if.items():
        if label == "prompts":
            continue
        interval = s["interval"]
        lines.append(
            f"| {label} | {s['speedup']:.3f}x [{interval[0]:.3f}-{interval[1]:.3f}] | {s['tau']:.2f} "
            f"| {s['mean_nodes']:.2f} |"
        )
    atomic_write_text(str(out / "README.md"), "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
