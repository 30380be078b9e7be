"""Does the latency profile model what each mode really costs? `python benchmarks/timing.py`

For each drafter, one `bench` run decodes AR, static d = n, LibraSpec and the oracle on the
first K prompts of GSM8K, HumanEval and MT-Bench first turns (read at run time from
../shared/data, never copied into the repository), modes interleaved prompt by prompt, with
a latency profile measured at the start of the run (`--fresh-profile`, the default) or read
from the cache. Per mode it reports measured and modeled seconds per token and their ratio:
1.00 means the profile's modeled time is the time the mode took. Writes
benchmarks/results/timing/README.md and timing.json. Run it on an otherwise idle machine;
the table records the load average before it and the share of the CPU other processes used
during it (the load average after it counts this run's own threads).
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

from libraspec.experiments.bench import BenchSpec, read_prompts, run_bench  # noqa: E402
from libraspec.experiments.provenance import cpu_clock, others_share  # noqa: E402
from libraspec.files import atomic_write_text  # noqa: E402
from libraspec.models.registry import load_pair  # noqa: E402
from libraspec.profiling import cached_profile, machine_description  # noqa: E402

from drafters import SUITES, add_run_arguments, publish  # noqa: E402  (benchmarks/drafters.py)

MODES = ("ar", "static", "libraspec", "oracle")


def ratios(records: dict) -> dict:
    """label -> measured and modeled seconds per token over every prompt, and measured / modeled."""
    out = {}
    for label, runs in records.items():
        rounds = [r for run in runs for r in run]
        tokens = sum(r.tau for r in rounds)
        measured, modeled = sum(r.measured_s for r in rounds), sum(r.modeled_s for r in rounds)
        out[label] = {"tokens": tokens, "measured_ms": 1000 * measured / tokens, "modeled_ms": 1000 * modeled / tokens,
                      "ratio": measured / modeled}
    return out


def table(result: dict) -> str:
    lines = [f"# Measured vs modeled time per token ({result['prompts']} prompts, {result['max_new_tokens']} tokens, "
             "greedy)", "",
             f"Embedded pair, LibraSpec alpha = {result['alpha']:g}, d_max = {result['d_max']}, "
             f"{result['threads']} thread(s) on {result.get('cpu', 'a CPU not recorded')}; load average (1 min) "
             f"{result['load_before'][0]:.2f} before"
             + (f", other processes used {100 * result['others_cpu_share']:.0f}% of the CPU during it"
                if result.get("others_cpu_share") is not None else f", {result['load_after'][0]:.2f} after")
             + ". Ratio = measured / modeled seconds per token; the profile is "
             f"{result['profile']}" + (" (ms: " + ", ".join(f"{k} {v:.1f}" for k, v in result["profile_ms"].items()) + ")"
                                if "profile_ms" in result else "") + ".", "", "Command: `python benchmarks/timing.py " + " ".join(result["argv"]) + "`",
             "", "The speedup columns divide AR's seconds per token by the mode's, measured beside it prompt by "
             "prompt, so a machine that runs faster or slower for a while moves both and their ratio stays; the "
             "per-token ratio moves with it.", "",
             "| drafter | mode | tokens | measured ms/token | modeled ms/token | measured / modeled | "
             "measured speedup | modeled speedup | measured / modeled speedup |",
             "|---|---|---|---|---|---|---|---|---|"]
    for drafter, modes in result["drafters"].items():
        ar = modes["ar"]
        for label, m in modes.items():
            measured, modeled = ar["measured_ms"] / m["measured_ms"], ar["modeled_ms"] / m["modeled_ms"]
            lines.append(f"| {drafter} | {label} | {m['tokens']} | {m['measured_ms']:.1f} | {m['modeled_ms']:.1f} | "
                         f"{m['ratio']:.3f} | {measured:.2f}x | {modeled:.2f}x | {measured / modeled:.3f} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_arguments(parser, prompts=2, max_new_tokens=96)
    parser.add_argument("--cached-profile", action="store_true", help="read the cached profile instead of "
                        "measuring a fresh one")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "timing"))
    parser.add_argument("--table-only", action="store_true", help="only rebuild README.md from timing.json")
    args = parser.parse_args()
    if args.table_only:
        publish(args.out, table(json.loads((Path(args.out) / "timing.json").read_text())))
        return 0
    torch.set_num_threads(args.threads)
    load_before, clock_before = os.getloadavg(), cpu_clock()
    pair = load_pair()
    profile = cached_profile(pair, max_tokens=args.d_max + 1, max_blocks=-(-args.d_max // pair.n),
                             refresh=not args.cached_profile)
    prompts = [p for file in SUITES.values() for p in read_prompts(Path(args.data) / file)[: args.prompts]]
    drafters = {}
    for drafter in args.drafters.split(","):
        spec = BenchSpec(modes=MODES, max_new_tokens=args.max_new_tokens, alpha=args.alpha, d_max=args.d_max,
                         annotate=False, drafter=drafter)
        drafters[drafter] = ratios(run_bench(pair, prompts, spec, profile=profile).records)
    result = {"prompts": len(prompts), "max_new_tokens": args.max_new_tokens, "alpha": args.alpha,
              "d_max": args.d_max, "threads": args.threads, "load_before": load_before,
              "load_after": os.getloadavg(), "others_cpu_share": others_share(clock_before, cpu_clock()), "argv": sys.argv[1:], "drafters": drafters,
              "profile": "read from the cache" if args.cached_profile else "measured at the start of the run",
              "ar_profile_ms": 1000 * profile.ar_token_time(), "cpu": machine_description()["cpu"],
              "profile_ms": {"verify_1": 1000 * profile.verify_s[0], "draft_1": 1000 * profile.draft_s[0],
                             "fit": 1000 * profile.fit_s, "lookup": 1000 * profile.lookup_s}}
    os.makedirs(args.out, exist_ok=True)
    atomic_write_text(str(Path(args.out) / "timing.json"), json.dumps(result, indent=1))
    publish(args.out, table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
