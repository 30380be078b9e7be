"""Drafters side by side on public prompts: `python benchmarks/drafters.py`.

For each suite (the first K prompts of GSM8K, HumanEval and MT-Bench first turns, read at run
time from ../shared/data and never copied into the repository) and each drafter, one `bench`
run decodes AR, static d = n, LibraSpec (oracle-annotated, for d*) and, for the drafter named
by --grid (default: the pair's default drafter), every static length in {1..n, 2n}
(bench.static_grid; the best static is chosen from it). Writes one JSON per (suite, drafter)
under benchmarks/results/drafters/ and a Markdown table with tau, measured and modeled speedups
over AR, the share of rounds with d* >= 3, how often LibraSpec extends / rolls back
(stats.regime_stats), and pooled figures (totals over suites). Timings are wall clock on this
machine: run it on an otherwise idle machine; the table lists the share of the CPU other
processes used during each run (provenance).
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

from libraspec.drafters import DRAFTERS  # noqa: E402
from libraspec.experiments.bench import (
    BenchSpec,
    records_path,
    run_bench,
    static_grid,  # noqa: E402
    write_result,
)
from libraspec.experiments.stats import regime_stats  # noqa: E402
from libraspec.files import atomic_write_text  # noqa: E402
from libraspec.models.registry import load_pair  # noqa: E402
from libraspec.paths import (  # noqa: E402
    PUBLIC_DATA,
    PUBLIC_SUITES,  # noqa: E402
    read_prompts,
)
from libraspec.records import read_trace  # noqa: E402
from libraspec.spec import RunSpec  # noqa: E402

DEFAULT_OUT = ROOT / "benchmarks" / "results" / "drafters"
SUITES = {name: PUBLIC_SUITES[name] for name in ("gsm8k", "humaneval", "mtbench")}


def run_suite(pair, suite: str, file: str, args) -> None:
    """Decode one suite with every drafter: OUT/<suite>-<drafter>.json and its records (the machine's
    load is in the JSON's provenance)."""
    n = pair.n
    prompts = read_prompts(Path(args.data) / file)[: args.prompts]
    for drafter in args.drafters.split(","):
        out = Path(args.out) / f"{suite}-{drafter}.json"
        if out.exists() and not args.force:
            continue
        lengths = static_grid(n, 2 * n) if drafter == args.grid else (n,)  # the grid: 1..n and 2n
        spec = BenchSpec(
            modes=("ar", "static", "libraspec"),
            max_new_tokens=args.max_new_tokens,
            alpha=args.alpha,
            d_max=args.d_max,
            static_lengths=lengths,
            annotate=("libraspec",),
            drafter=drafter,
        )
        write_result(run_bench(pair, prompts, spec, source=f"{file} (first {args.prompts})"), out)


def row(path: Path) -> dict:
    """One table row from a run's JSON summary and its records."""
    summary = json.loads(path.read_text())
    modes, n = summary["modes"], summary["config"]["n"]
    statics = {label: m for label, m in modes.items() if label.startswith("static")}
    best = max(statics, key=lambda label: statics[label]["speedup_modeled"])
    frame = read_trace(records_path(path))
    suite, drafter = path.stem.split("-", 1)
    config = summary["config"]
    return {
        "suite": suite,
        "drafter": drafter,
        "n": n,
        "threads": config["threads"],
        "cpu": config["machine"]["cpu"],
        "setting": (config["num_prompts"], config["max_new_tokens"], config["alpha"], config["d_max"]),
        "upkeep_modeled": "fit_s" in config["profile"],
        **{k: modes["libraspec"][k] for k in ("tau", "speedup_measured", "speedup_modeled")},
        "static_n": modes[f"static-{n}" if len(statics) > 1 else "static"]["speedup_modeled"],
        "best_static": best,
        "best_static_modeled": statics[best]["speedup_modeled"],
        **regime_stats(frame[frame["label"] == "libraspec"], n),
        "profile_ar_ratio": summary["config"]["profile_check"]["ratio"],
        "others": summary["config"].get("provenance", {}).get("others_cpu_share"),
        "totals": {label: [m["wall_s"], m["modeled_s"], m["tokens"]] for label, m in modes.items()},
        "grid": len(statics) > 1,
    }


def _others(r: dict) -> str:
    return "not recorded" if r["others"] is None else f"{100 * r['others']:.0f}%"


def run_command(args, prompts: int, tokens: int, alpha: float, d_max: int, grid: str) -> str:
    """The command that decodes these run files again (also when the table is rebuilt with --table-only);
    `grid` is the drafter whose run files hold the full static grid, "none" when none does."""
    out = Path(args.out).resolve()
    where = "" if out == DEFAULT_OUT else f" --out {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}"
    return (
        f"python benchmarks/drafters.py --force --drafters {args.drafters} --grid {grid} --prompts {prompts} "
        f"--max-new-tokens {tokens} --alpha {alpha:g} --d-max {d_max}{where}"
    )


def table(args) -> str:
    """The Markdown report from every row file present."""
    rows = [
        row(p)
        for suite in SUITES
        for drafter in args.drafters.split(",")
        for p in [Path(args.out) / f"{suite}-{drafter}.json"]
        if p.exists()
    ]
    if not rows:
        raise SystemExit(f"no run files in {args.out}: run without --table-only first")
    settings = {r["setting"] for r in rows}
    if len(settings) > 1:
        raise SystemExit(f"the run files in {args.out} used different settings {sorted(settings)}: rerun them")
    ((prompts, tokens, alpha, d_max),) = settings
    grid = next((r["drafter"] for r in rows if r["grid"]), "none")
    threads = ", ".join(str(t) for t in sorted({r["threads"] for r in rows}))
    recorded = any(r["others"] is not None for r in rows)
    lines = [
        f"# Drafters on public prompts ({prompts} per suite, {tokens} tokens, greedy)",
        "",
        f"Embedded pair, n = {rows[0]['n']}, LibraSpec alpha = {alpha:g}, d_max = {d_max}, {threads} "
        f"thread(s) per run on {', '.join(sorted({r['cpu'] for r in rows}))} (read from the run files). "
        + (
            "The last column is the share of the machine's CPU time other processes used during each run "
            "(not this one's own threads). "
            if recorded
            else "The load was not recorded for these runs. "
        )
        + "AR is decoded beside every mode on each prompt, so ratios share the load."
        + (
            ""
            if all(r["upkeep_modeled"] for r in rows)
            else " The latency profiles in these run files predate the profile's drafter context upkeep "
            "(fit_s) and its timing right after a target forward, so their modeled columns rate the "
            "block-diffusion and hybrid drafters too cheaply; measured columns are unaffected."
        ),
        f"Command (the settings read from the run files): `{run_command(args, prompts, tokens, alpha, d_max, grid)}`",
        "",
        "| suite | drafter | tau | LibraSpec measured | LibraSpec modeled | static n modeled | best static "
        "(modeled) | d* >= 3 | extends | rolls back | AR steps | max d | AR measured / profile | others' CPU |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    pooled = {}
    for r in rows:
        lines.append(
            f"| {r['suite']} | {r['drafter']} | {r['tau']:.2f} | {r['speedup_measured']:.2f}x | "
            f"{r['speedup_modeled']:.2f}x | {r['static_n']:.2f}x | {r['best_static']} "
            f"{r['best_static_modeled']:.2f}x | {r['dstar_ge3']:.0%} | {r['extends']:.0%} | "
            f"{r['rolls_back']:.0%} | {r['ar_steps']:.0%} | {r['max_d']} | {r['profile_ar_ratio']:.2f} | "
            f"{_others(r)} |"
        )
        for label, got in r["totals"].items():
            acc = pooled.setdefault((r["drafter"], label), [0.0, 0.0, 0, 0, 0])
            for i in range(3):
                acc[i] += got[i]
        acc = pooled.setdefault((r["drafter"], "d* >= 3"), [0.0, 0.0, 0, 0, 0])
        acc[3] += r["dstar_ge3_count"]
        acc[4] += r["judged"]
    lines += [
        "",
        "Pooled over suites (totals): speedup = AR seconds per token / mode seconds per token. The "
        "last column is the mode's measured seconds over its modeled seconds (1.00: the latency profile "
        "predicted its wall time exactly).",
        "",
        "| drafter | mode | measured | modeled | measured / modeled time |",
        "|---|---|---|---|---|",
    ]
    for (drafter, label), (meas, mod, tokens, hits, judged) in sorted(pooled.items()):
        if label == "d* >= 3":
            lines.append(f"| {drafter} | LibraSpec rounds with d* >= 3 | {hits}/{judged} = {hits / judged:.0%} | | |")
        else:
            ar = pooled[(drafter, "ar")]
            lines.append(
                f"| {drafter} | {label} | {(ar[0] / ar[2]) / (meas / tokens):.2f}x | "
                f"{(ar[1] / ar[2]) / (mod / tokens):.2f}x | {meas / mod:.2f} |"
            )
    return "\n".join(lines) + "\n"


def add_run_arguments(parser: argparse.ArgumentParser, prompts: int, max_new_tokens: int) -> None:
    """The flags of a run over the public suites, shared with timing.py."""
    parser.add_argument("--data", default=str(PUBLIC_DATA))
    parser.add_argument("--prompts", type=int, default=prompts, help="prompts per suite")
    parser.add_argument("--max-new-tokens", type=int, default=max_new_tokens)
    parser.add_argument(
        "--alpha",
        type=float,
        default=RunSpec().alpha,
        help="LibraSpec's alpha (default: the library's, 2.2, which benchmarks/lookup_alpha.py "
        "also picks for look-up drafting on the held-apart answers)",
    )
    parser.add_argument("--d-max", type=int, default=48)
    parser.add_argument("--drafters", default=",".join(DRAFTERS))
    parser.add_argument("--threads", type=int, default=2)


def publish(out: str, text: str) -> None:
    """Write a results folder's README.md and show it."""
    atomic_write_text(str(Path(out) / "README.md"), text)
    print(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_arguments(parser, prompts=8, max_new_tokens=128)
    parser.add_argument("--suites", default=",".join(SUITES))
    parser.add_argument(
        "--grid",
        default=None,
        help="drafter that also runs the full static grid (default: the "
        "pair's default drafter, the one the issue's goals are judged on; none: no drafter)",
    )
    parser.add_argument("--table-only", action="store_true", help="only rebuild README.md from the results")
    parser.add_argument("--force", action="store_true", help="decode again runs whose results exist")
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    if not args.table_only:
        pair = load_pair()
        args.grid = args.grid or pair.default_drafter
        for suite in args.suites.split(","):
            run_suite(pair, suite, SUITES[suite], args)
    publish(args.out, table(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
