"""Drafters side by side on public prompts: `python benchmarks/drafters.py`.

For each suite (the first K prompts of GSM8K, HumanEval and MT-Bench first turns, read at run
time from ../shared/data and never copied into the repository) and each drafter, one `bench`
run decodes AR, static d = n, LibraSpec (oracle-annotated, for d*) and, for the drafter named
by --grid, every static length in {1..n, 2n} (the best static is chosen from that grid). Writes
one JSON per (suite, drafter) under benchmarks/results/drafters/ and a Markdown table with tau,
measured and modeled speedups over AR, the share of rounds with d* >= 3, how often LibraSpec
extends / rolls back, and pooled figures (totals over suites). Timings are wall clock on this
machine: run it on an otherwise idle machine and state the load (the table records it).
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

from libraspec.experiments.bench import BenchSpec, read_prompts, run_bench, write_result  # noqa: E402
from libraspec.drafters import DRAFTERS  # noqa: E402
from libraspec.files import atomic_write_text  # noqa: E402
from libraspec.models.registry import load_pair  # noqa: E402

SUITES = {"gsm8k": "gsm8k_test.jsonl", "humaneval": "humaneval.jsonl", "mtbench": "mt_bench_questions.jsonl"}


def round_stats(runs) -> dict:
    """Regime of LibraSpec's rounds: d* >= 3 share, extensions, rollbacks, AR steps, longest d."""
    rounds = [r for run in runs for r in run]
    judged = [r.oracle_length for r in rounds if r.oracle_length is not None]
    return {"rounds": len(rounds),
            "dstar_ge3": sum(d >= 3 for d in judged) / len(judged) if judged else None,
            "extends": sum(any(not s.rollback for s in r.policy_steps) for r in rounds) / len(rounds),
            "rolls_back": sum(any(s.rollback and s.d_after < s.d_before for s in r.policy_steps)
                              for r in rounds) / len(rounds),
            "ar_steps": sum(r.chosen_length == 0 for r in rounds) / len(rounds),
            "max_d": max(r.chosen_length for r in rounds),
            "judged": len(judged), "dstar_ge3_count": sum(d >= 3 for d in judged)}


def totals(runs) -> tuple[float, float, int]:
    """(measured s, modeled s, tokens) summed over a mode's runs."""
    rounds = [r for run in runs for r in run]
    return sum(r.measured_s for r in rounds), sum(r.modeled_s for r in rounds), sum(r.tau for r in rounds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--alpha", type=float, default=8.0)
    parser.add_argument("--d-max", type=int, default=48)
    parser.add_argument("--drafters", default=",".join(DRAFTERS))
    parser.add_argument("--grid", default="hybrid", help="drafter that also runs the full static grid")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "drafters"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    pair = load_pair()
    n = pair.n
    os.makedirs(args.out, exist_ok=True)
    load_before = os.getloadavg()
    table, pooled = [], {}
    for suite, file in SUITES.items():
        prompts = read_prompts(Path(args.data) / file)[: args.prompts]
        for drafter in args.drafters.split(","):
            lengths = tuple(range(1, n + 1)) + (2 * n,) if drafter == args.grid else (n,)
            spec = BenchSpec(modes=("ar", "static", "libraspec"), max_new_tokens=args.max_new_tokens,
                             alpha=args.alpha, d_max=args.d_max, static_lengths=lengths,
                             annotate=("libraspec",), drafter=drafter)
            result = run_bench(pair, prompts, spec, source=f"{file} (first {args.prompts})")
            write_result(result, Path(args.out) / f"{suite}-{drafter}.json")
            modes = result.summary["modes"]
            statics = {label: m for label, m in modes.items() if label.startswith("static")}
            best = max(statics, key=lambda label: statics[label]["speedup_modeled"])
            row = {"suite": suite, "drafter": drafter, **{k: modes["libraspec"][k] for k in (
                "tau", "speedup_measured", "speedup_modeled")}, "static_n": modes[f"static-{n}" if len(
                    statics) > 1 else "static"]["speedup_modeled"], "best_static": best,
                   "best_static_modeled": statics[best]["speedup_modeled"],
                   **round_stats(result.records["libraspec"]),
                   "profile_ar_ratio": result.summary["config"]["profile_check"]["ratio"]}
            table.append(row)
            for label in ("ar", "libraspec") + tuple(statics):
                got = totals(result.records[label])
                acc = pooled.setdefault((drafter, label), [0.0, 0.0, 0])
                for i in range(3):
                    acc[i] += got[i]
            print(json.dumps(row), file=sys.stderr, flush=True)
    load_after = os.getloadavg()
    lines = [f"# Drafters on public prompts ({args.prompts} per suite, {args.max_new_tokens} tokens, greedy)", "",
             f"Pair {pair.name}, n = {n}, LibraSpec alpha = {args.alpha:g}, d_max = {args.d_max}, "
             f"{args.threads} threads. Load average (1, 5, 15 min) before: "
             f"{', '.join(f'{x:.2f}' for x in load_before)}; after: {', '.join(f'{x:.2f}' for x in load_after)}.",
             "Command: `python benchmarks/drafters.py " + " ".join(sys.argv[1:]) + "`", "",
             "| suite | drafter | tau | LibraSpec measured | LibraSpec modeled | static n modeled | best static "
             "(modeled) | d* >= 3 | extends | rolls back | AR steps | max d | AR measured / profile |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in table:
        lines.append(f"| {r['suite']} | {r['drafter']} | {r['tau']:.2f} | {r['speedup_measured']:.2f}x | "
                     f"{r['speedup_modeled']:.2f}x | {r['static_n']:.2f}x | {r['best_static']} "
                     f"{r['best_static_modeled']:.2f}x | {r['dstar_ge3']:.0%} | {r['extends']:.0%} | "
                     f"{r['rolls_back']:.0%} | {r['ar_steps']:.0%} | {r['max_d']} | {r['profile_ar_ratio']:.2f} |")
    lines += ["", "Pooled over suites (totals): speedup = AR seconds per token / mode seconds per token.", "",
              "| drafter | mode | measured | modeled |", "|---|---|---|---|"]
    for (drafter, label), (meas, mod, tokens) in sorted(pooled.items()):
        if label == "ar":
            continue
        ar = pooled[(drafter, "ar")]
        lines.append(f"| {drafter} | {label} | {(ar[0] / ar[2]) / (meas / tokens):.2f}x | "
                     f"{(ar[1] / ar[2]) / (mod / tokens):.2f}x |")
    atomic_write_text(str(Path(args.out) / "README.md"), "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
