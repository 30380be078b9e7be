"""Does the latency profile model what each mode really costs? `python benchmarks/timing.py`

Each drafter decodes AR, static d = n, LibraSpec and the oracle on the first K prompts of
GSM8K, HumanEval and MT-Bench first turns (read at run time from ../shared/data, never copied
into the repository), prompt by prompt. The latency profile that models a drafter's four runs of a prompt is measured
right before them (`--profile each-drafter`, the default: this VM's speed wanders by tens of
percent within minutes, so a profile describes the machine of the minute it was measured in),
before each prompt's runs of every drafter (`each-prompt`), once at the start (`start`) or read
from the cache (`cached`). Per mode it reports
measured and modeled seconds per token and their ratio: 1.00 means the profile's modeled time
is the time the mode took. Writes
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

from drafters import SUITES, add_run_arguments, publish  # noqa: E402  (benchmarks/drafters.py)

from libraspec.drafters import make_drafter  # noqa: E402
from libraspec.experiments.bench import BenchSpec, run_bench  # noqa: E402
from libraspec.experiments.provenance import cpu_clock, others_share  # noqa: E402
from libraspec.files import atomic_write_text  # noqa: E402
from libraspec.models.registry import load_pair  # noqa: E402
from libraspec.paths import read_prompts  # noqa: E402
from libraspec.profiling import cached_profile, machine_description  # noqa: E402

MODES = ("ar", "static", "libraspec", "oracle")
PROFILES = {
    "each-drafter": "measured right before each drafter's runs of each prompt",
    "each-prompt": "measured right before each prompt's runs",
    "start": "measured at the start of the run",
    "cached": "read from the cache",
}


def ratios(records: dict) -> dict:
    """label -> measured and modeled seconds per token over every prompt, and measured / modeled."""
    out = {}
    for label, runs in records.items():
        rounds = [r for run in runs for r in run]
        tokens = sum(r.tau for r in rounds)
        measured, modeled = sum(r.measured_s for r in rounds), sum(r.modeled_s for r in rounds)
        out[label] = {
            "tokens": tokens,
            "measured_ms": 1000 * measured / tokens,
            "modeled_ms": 1000 * modeled / tokens,
            "ratio": measured / modeled,
        }
    return out


def parts(rounds, profile, upkeep_s: float) -> dict:
    """Summed seconds of one run's rounds by part, measured and modeled: drafting (the modeled part is
    what the round's model leaves after verification), the policy (not modeled) and verification with
    the caches' upkeep (an AR round is all verification)."""
    out = {"draft": [0.0, 0.0], "policy": [0.0, 0.0], "verify": [0.0, 0.0]}
    for r in rounds:
        verify = r.modeled_s if r.mode == "ar" else profile.verify_time(r.chosen_length + 1) + upkeep_s
        for part, measured, modeled in (
            ("draft", r.draft_s, r.modeled_s - verify),
            ("policy", r.policy_s, 0.0),
            ("verify", r.verify_s, verify),
        ):
            out[part][0] += measured
            out[part][1] += modeled
    return out


BUCKETS = ((1, 1), (2, 4), (5, 8), (9, 16), (17, 64))  # tokens verified in one forward, k = d + 1
BUCKET_NAMES = tuple(f"{lo}-{hi}" if lo < hi else str(lo) for lo, hi in BUCKETS)


def by_width(rounds, profile, upkeep_s: float, into: dict) -> None:
    """Adds each speculative round's measured and modeled verification seconds to the bucket of its
    k = d + 1: `into[bucket] = [measured s, modeled s, rounds]`, the AR mode's rounds left out."""
    for r in rounds:
        if r.mode == "ar":
            continue
        k = r.chosen_length + 1
        bucket = next(name for name, (lo, hi) in zip(BUCKET_NAMES, BUCKETS) if lo <= k <= hi)
        total = into.setdefault(bucket, [0.0, 0.0, 0])
        total[0] += r.verify_s
        total[1] += profile.verify_time(k) + upkeep_s
        total[2] += 1


def table(result: dict) -> str:
    lines = [
        f"# Measured vs modeled time per token ({result['prompts']} prompts, {result['max_new_tokens']} tokens, "
        "greedy)",
        "",
        f"Embedded pair, LibraSpec alpha = {result['alpha']:g}, d_max = {result['d_max']}, "
        f"{result['threads']} thread(s) on {result.get('cpu', 'a CPU not recorded')}; load average (1 min) "
        f"{result['load_before'][0]:.2f} before"
        + (
            f", other processes used {100 * result['others_cpu_share']:.0f}% of the CPU during it"
            if result.get("others_cpu_share") is not None
            else f", {result['load_after'][0]:.2f} after"
        )
        + ". Ratio = measured / modeled seconds per token; the profile is "
        f"{result['profile']}"
        + (
            " (ms: " + ", ".join(f"{k} {v:.1f}" for k, v in result["profile_ms"].items()) + ")"
            if "profile_ms" in result
            else ""
        )
        + "."
        + (
            " The AR step of the profiles measured during the run: "
            + ", ".join(f"{v:.1f}" for v in result["profile_ar_ms"])
            + " ms."
            if len(result.get("profile_ar_ms", ())) > 1
            else ""
        ),
        "",
        "Command: `python benchmarks/timing.py " + " ".join(result["argv"]) + "`",
        "",
        "The speedup columns divide AR's seconds per token by the mode's, measured beside it prompt by "
        "prompt, so a machine that runs faster or slower for a while moves both and their ratio stays; the "
        "per-token ratio moves with it.",
        "",
        "| drafter | mode | tokens | measured ms/token | modeled ms/token | measured / modeled | "
        "measured speedup | modeled speedup | measured / modeled speedup |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for drafter, modes in result["drafters"].items():
        ar = modes["ar"]
        for label, m in modes.items():
            measured, modeled = ar["measured_ms"] / m["measured_ms"], ar["modeled_ms"] / m["modeled_ms"]
            lines.append(
                f"| {drafter} | {label} | {m['tokens']} | {m['measured_ms']:.1f} | {m['modeled_ms']:.1f} | "
                f"{m['ratio']:.3f} | {measured:.2f}x | {modeled:.2f}x | {measured / modeled:.3f} |"
            )
    if all("parts" in m for modes in result["drafters"].values() for m in modes.values()):
        lines += [
            "",
            "Where the time goes, ms per token, measured / modeled (the model leaves the policy's time out; "
            "verification includes the caches' upkeep):",
            "",
            "| drafter | mode | draft | policy | verify |",
            "|---|---|---|---|---|",
        ]
        for drafter, modes in result["drafters"].items():
            for label, m in modes.items():
                cells = [
                    f"{1000 * a / m['tokens']:.1f} / {1000 * b / m['tokens']:.1f}"
                    for a, b in (m["parts"][p] for p in ("draft", "policy", "verify"))
                ]
                lines.append(f"| {drafter} | {label} | " + " | ".join(cells) + " |")
    if result.get("verify_by_width"):
        lines += [
            "",
            "Verification by the tokens one forward verifies (k = d + 1), every speculative round of every drafter:",
            "",
            "| k | rounds | measured ms | modeled ms | measured / modeled |",
            "|---|---|---|---|---|",
        ]
        for bucket, (measured, modeled, count) in result["verify_by_width"].items():
            lines.append(
                f"| {bucket} | {count} | {1000 * measured / count:.1f} | {1000 * modeled / count:.1f} | "
                f"{measured / modeled:.3f} |"
            )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_arguments(parser, prompts=2, max_new_tokens=96)
    parser.add_argument(
        "--profile",
        choices=tuple(PROFILES),
        default="each-drafter",
        help="when the latency profile is measured: " + "; ".join(f"{k}: {v}" for k, v in PROFILES.items()),
    )
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "timing"))
    parser.add_argument("--table-only", action="store_true", help="only rebuild README.md from timing.json")
    args = parser.parse_args()
    if args.table_only:
        publish(args.out, table(json.loads((Path(args.out) / "timing.json").read_text())))
        return 0
    torch.set_num_threads(args.threads)
    load_before, clock_before = os.getloadavg(), cpu_clock()
    pair = load_pair()
    prompts = [p for file in SUITES.values() for p in read_prompts(Path(args.data) / file)[: args.prompts]]
    specs = {
        drafter: BenchSpec(
            modes=MODES,
            max_new_tokens=args.max_new_tokens,
            alpha=args.alpha,
            d_max=args.d_max,
            annotate=False,
            drafter=drafter,
        )
        for drafter in args.drafters.split(",")
    }
    records = {drafter: {} for drafter in specs}  # drafter -> label -> one run per prompt
    split = {drafter: {} for drafter in specs}  # drafter -> label -> part -> [measured s, modeled s]
    widths = {}  # k bucket -> [measured s, modeled s, rounds]
    profiles = []
    for index, prompt in enumerate(prompts):
        for turn, (drafter, spec) in enumerate(specs.items()):
            if (
                (index, turn) == (0, 0)
                or args.profile == "each-drafter"
                or (args.profile == "each-prompt" and turn == 0)
            ):
                profiles.append(
                    cached_profile(
                        pair,
                        max_tokens=args.d_max + 1,
                        max_blocks=-(-args.d_max // pair.n),
                        refresh=args.profile != "cached",
                    )
                )
            upkeep_s = profiles[-1].fit_s if make_drafter(drafter, pair).needs_features else 0.0
            for label, runs in run_bench(pair, [prompt], spec, profile=profiles[-1]).records.items():
                records[drafter].setdefault(label, []).extend(runs)
                rounds = [r for run in runs for r in run]
                by_width(rounds, profiles[-1], upkeep_s, widths)
                for part, (measured, modeled) in parts(rounds, profiles[-1], upkeep_s).items():
                    total = split[drafter].setdefault(label, {}).setdefault(part, [0.0, 0.0])
                    total[0], total[1] = total[0] + measured, total[1] + modeled
        print(f"prompt {index + 1}/{len(prompts)} decoded", file=sys.stderr, flush=True)
    drafters = {
        drafter: {label: {**m, "parts": split[drafter][label]} for label, m in ratios(by_label).items()}
        for drafter, by_label in records.items()
    }
    profile = profiles[0]
    result = {
        "prompts": len(prompts),
        "max_new_tokens": args.max_new_tokens,
        "alpha": args.alpha,
        "d_max": args.d_max,
        "threads": args.threads,
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "others_cpu_share": others_share(clock_before, cpu_clock()),
        "argv": sys.argv[1:],
        "drafters": drafters,
        "profile": PROFILES[args.profile] + (", the first" if len(profiles) > 1 else ""),
        "profile_ar_ms": [1000 * p.ar_token_time() for p in profiles],
        "cpu": machine_description()["cpu"],
        "verify_by_width": {name: widths[name] for name in BUCKET_NAMES if name in widths},
        "profile_ms": {
            "verify_1": 1000 * profile.verify_s[0],
            "draft_1": 1000 * profile.draft_s[0],
            "fit": 1000 * profile.fit_s,
            "lookup": 1000 * profile.lookup_s,
        },
    }
    os.makedirs(args.out, exist_ok=True)
    atomic_write_text(str(Path(args.out) / "timing.json"), json.dumps(result, indent=1))
    publish(args.out, table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
