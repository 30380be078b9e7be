"""LibraSpec's alpha for look-up drafting, chosen on answers never evaluated on: `python benchmarks/lookup_alpha.py`.

The data are the held-apart Magpie answers (`lookup_corpus.held_apart`: the target's greedy answers
kept out of the look-up corpus and used to fit its confidences; never the public suites nor
assets/prompts). Greedy speculative decoding of each answer's prompt is replayed without the
target (`analysis.replay`: exact for look-up drafting) under LibraSpec over a grid of alpha and
under every static length in {1..n, 2n}, and timed with this machine's latency profile. Writes
the modeled speedups over AR, with 95% bootstrap intervals over answers and LibraSpec's ratio to
the best static length (paired over the same answers), to benchmarks/results/lookup_alpha/.
Nothing is measured here but the profile, so the load only matters while it is measured.
`--answers FOLDER` replays instead the greedy answers of a benchmarks/drafters.py run of the
look-up drafter on the public suites, with that run's profile: evaluation only, to see how the
choice holds on another machine's cost curve, never to choose on.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from drafters import SUITES  # noqa: E402  (benchmarks/drafters.py)

from libraspec.analysis.replay import replay_greedy  # noqa: E402
from libraspec.cost import LatencyProfile  # noqa: E402
from libraspec.drafters import make_drafter  # noqa: E402
from libraspec.engine import end_ids  # noqa: E402
from libraspec.experiments.bench import static_grid  # noqa: E402
from libraspec.experiments.stats import LEVEL, RESAMPLES, SEED, per_prompt, resample_indices, speedup_interval  # noqa: E402
from libraspec.files import atomic_write_text  # noqa: E402
from libraspec.models.registry import load_pair  # noqa: E402
from libraspec.modes import make_policy  # noqa: E402
from libraspec.paths import PUBLIC_DATA, read_prompts  # noqa: E402
from libraspec.profiling import profile_reaching  # noqa: E402
from libraspec.records import read_trace  # noqa: E402
from libraspec.train.lookup_corpus import held_apart, sequences  # noqa: E402

ALPHAS = (0.5, 1.0, 1.5, 2.0, 2.2, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0)


def paired_ratio(rows: list[dict], best: list[dict]) -> tuple[float, tuple[float, float]]:
    """LibraSpec's speedup over the best static's, and its percentile bootstrap interval over answers
    (both resampled together, so the interval is of the ratio on the same answers)."""

    def rate(table, draws):  # (R,) seconds per token
        tokens = np.array([r["tokens"] for r in table], dtype=float)
        spent = np.array([r["modeled_s"] for r in table], dtype=float)
        return spent[draws].sum(axis=-1) / tokens[draws].sum(axis=-1)

    everyone = np.arange(len(rows))
    draws = resample_indices([0] * len(rows), RESAMPLES, SEED)  # (R, P)
    tail = 100 * (1 - LEVEL) / 2
    low, high = np.percentile(rate(best, draws) / rate(rows, draws), (tail, 100 - tail))
    return float(rate(best, everyone) / rate(rows, everyone)), (float(low), float(high))


def held_apart_answers(max_new_tokens: int, every: int = 1) -> list[tuple[list[int], list[int]]]:
    """(prompt, greedy answer) of every `every`-th held-apart Magpie answer, cut to `max_new_tokens`."""
    return [
        (ids[:start], ids[start : start + max_new_tokens])
        for index, ids, start in sequences("magpie_ids")
        if held_apart("magpie_ids", index)
    ][::every]


def run_answers(pair, folder: Path, data: Path) -> tuple[LatencyProfile, dict[str, list]]:
    """The profile and, per suite, the (prompt, greedy answer) pairs of a benchmarks/drafters.py run
    of the look-up drafter: its prompts read again from `data`, its answers from its AR records
    (evaluation only)."""
    profiles, answers = [], {}
    for suite, file in SUITES.items():
        summary = json.loads((folder / f"{suite}-lookup.json").read_text())
        profiles.append(summary["config"]["profile"])
        frame = read_trace(str(folder / f"{suite}-lookup.records.parquet"))
        ar = frame[frame["label"] == "ar"].sort_values(["prompt_index", "round_index"])
        for index, prompt in enumerate(read_prompts(data / file)[: summary["config"]["num_prompts"]]):
            answer = [int(t) for tokens in ar[ar["prompt_index"] == index]["committed_tokens"] for t in tokens]
            answers.setdefault(suite, []).append((pair.encode_prompt(prompt), answer))
    if any(p != profiles[0] for p in profiles):
        raise SystemExit(f"the run files in {folder} were modeled with different profiles")
    return LatencyProfile.from_dict(profiles[0]), answers


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--alphas", default=",".join(f"{a:g}" for a in ALPHAS))
    parser.add_argument("--d-max", type=int, default=48)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--every", type=int, default=1, help="replay every k-th held-apart answer")
    parser.add_argument("--threads", type=int, default=2, help="threads while the latency profile is measured")
    parser.add_argument(
        "--answers",
        default="held-apart",
        help="held-apart (the Magpie answers kept out of the "
        "corpus, the default: what alpha is chosen on) or a folder of benchmarks/drafters.py run "
        "files: that run's greedy answers, replayed with that run's profile (evaluation only)",
    )
    parser.add_argument("--data", default=str(PUBLIC_DATA), help="the public prompts, for --answers FOLDER")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "lookup_alpha"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    pair = load_pair()
    n = pair.n
    if args.answers == "held-apart":
        profile = profile_reaching(pair, args.d_max)
        answers = held_apart_answers(args.max_new_tokens, args.every)
        source = "held-apart answers"
    else:
        profile, by_suite = run_answers(pair, Path(args.answers), Path(args.data))
        answers = [answer for suite in by_suite.values() for answer in suite][:: args.every]
        source = f"greedy answers of the run in {args.answers}, modeled with its profile"
    policies = {f"static-{d}": make_policy("static", n, static_length=d) for d in static_grid(n, 2 * n)}
    policies |= {
        f"libraspec-{a:g}": make_policy("libraspec", n, alpha=a, d_max=args.d_max)
        for a in (float(x) for x in args.alphas.split(","))
    }
    drafter = make_drafter("lookup", pair)
    results = {}
    for label, policy in policies.items():
        runs = [
            replay_greedy(drafter, policy, prompt, output, args.max_new_tokens, profile, eos_ids=end_ids(pair))
            for prompt, output in answers
        ]
        rows = per_prompt(runs, None)
        judged = [r for run in runs for r in run if r.chosen_length]
        results[label] = {
            "rows": rows,
            "tau": sum(r.tau for run in runs for r in run) / sum(len(run) for run in runs),
            "speedup": profile.ar_token_time() * sum(r["tokens"] for r in rows) / sum(r["modeled_s"] for r in rows),
            "interval": speedup_interval(rows, "modeled_s", ar_rate=profile.ar_token_time()),
            "extends": (sum(any(not s.rollback for s in r.policy_steps) for r in judged) / len(judged))
            if judged
            else None,
        }
        print(f"{label}: {results[label]['speedup']:.3f}x", flush=True)
    statics = [label for label in results if label.startswith("static")]
    best = max(statics, key=lambda label: results[label]["speedup"])
    lines = [
        f"# LibraSpec's alpha for look-up drafting ({len(answers)} {source}, "
        f"{sum(r['tokens'] for r in results[best]['rows'])} tokens, greedy replay)",
        "",
        f"Embedded pair, look-up drafter, n = {n}, d_max = {args.d_max}, at most {args.max_new_tokens} new tokens "
        f"per answer. Modeled with the latency profile ({profile.meta.get('cpu', '?')}, "
        f"{profile.meta.get('threads', '?')} threads; AR step {1000 * profile.ar_token_time():.1f} ms). "
        f"Intervals: 95% percentile bootstrap over answers ({RESAMPLES} resamples); the ratio to the best "
        f"static length ({best}) resamples both on the same answers.",
        f"Command: `python benchmarks/lookup_alpha.py{''.join(' ' + a for a in sys.argv[1:])}`",
        "",
        "| policy | tau | modeled speedup over AR | 95% interval | vs best static (paired) | extends |",
        "|---|---|---|---|---|---|",
    ]
    for label, r in results.items():
        low, high = r["interval"]
        versus = ""
        if label not in statics:
            ratio, (low_ratio, high_ratio) = paired_ratio(r["rows"], results[best]["rows"])
            versus = f"{ratio:.3f}x [{low_ratio:.3f}, {high_ratio:.3f}]"
        extends = "" if label in statics or r["extends"] is None else f"{100 * r['extends']:.0f}%"
        lines.append(
            f"| {label} | {r['tau']:.2f} | {r['speedup']:.3f}x | [{low:.3f}, {high:.3f}] | {versus} | {extends} |"
        )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(str(out / "README.md"), "\n".join(lines) + "\n")
    atomic_write_text(
        str(out / "results.json"),
        json.dumps(
            {
                "answers": len(answers),
                "d_max": args.d_max,
                "max_new_tokens": args.max_new_tokens,
                "best_static": best,
                "profile": profile.to_dict(),
                "policies": {
                    k: {key: v for key, v in r.items() if key != "rows"} | {"per_answer": r["rows"]}
                    for k, r in results.items()
                },
            },
            indent=1,
        ),
    )
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
