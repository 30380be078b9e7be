"""How the look-up corpus's size moves d* >= 3 and tau: `python benchmarks/lookup_corpus_size.py`.

The look-up drafter quotes the pair's own past answers (`lookup_corpus.py`); issue 13 asks for
d* >= 3 in at least 20% of rounds. This replays greedy LibraSpec decoding (`analysis.replay`,
annotated with the oracle's d* over a look-ahead of d_max drafts, as the engine's annotation) with
corpora made of the first fraction of the corpus's answers in a fixed random order, on
(1) held-apart Magpie answers (never in any corpus) and (2) the target's greedy answers to the
public prompts of a benchmarks/drafters.py run (`--answers`, its AR records; the prompts are read
at run time from ../shared/data and only evaluated on: nothing is chosen from them), priced with
that run's latency profile. The confidences keep the shipped calibration. Writes
benchmarks/results/lookup_corpus_size/README.md and results.json.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from drafters import SUITES  # noqa: E402  (benchmarks/drafters.py)
from lookup_alpha import held_apart_answers, run_answers  # noqa: E402  (benchmarks/lookup_alpha.py)

from libraspec.analysis.replay import replay_greedy  # noqa: E402
from libraspec.drafters.lookup import SEPARATOR, CorpusIndex, LookupDrafter  # noqa: E402
from libraspec.engine import end_ids  # noqa: E402
from libraspec.files import atomic_write_text  # noqa: E402
from libraspec.models.registry import load_pair  # noqa: E402
from libraspec.modes import make_policy  # noqa: E402
from libraspec.paths import PUBLIC_DATA  # noqa: E402
from libraspec.spec import RunSpec
from libraspec.train.lookup_corpus import corpus_sequences  # noqa: E402

FRACTIONS = (0.0, 0.0625, 0.125, 0.25, 0.5, 1.0)


def corpus_index(responses: list[list[int]], fraction: float) -> CorpusIndex | None:
    kept = responses[: round(fraction * len(responses))]
    if not kept:
        return None
    return CorpusIndex(np.asarray([t for seq in kept for t in [*seq, SEPARATOR]], dtype=np.int64))


def regime(runs) -> dict:
    """tau, the judged rounds and the share with d* >= 3, and the modeled seconds per token."""
    rounds = [r for run in runs for r in run]
    judged = [r for r in rounds if r.oracle_length is not None]
    tokens = sum(r.tau for r in rounds)
    return {
        "rounds": len(rounds),
        "tau": tokens / len(rounds),
        "judged": len(judged),
        "long": sum(r.oracle_length >= 3 for r in judged),
        "tokens": tokens,
        "modeled_s_per_token": sum(r.modeled_s for r in rounds) / tokens,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--answers",
        default=str(ROOT / "benchmarks" / "results" / "drafters"),
        help="a benchmarks/drafters.py results folder: its look-up runs' answers and profile",
    )
    parser.add_argument("--data", default=str(PUBLIC_DATA))
    parser.add_argument("--alpha", type=float, default=RunSpec().alpha)
    parser.add_argument("--d-max", type=int, default=48)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--every", type=int, default=3, help="replay every k-th held-apart answer")
    parser.add_argument("--fractions", default=",".join(f"{f:g}" for f in FRACTIONS))
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "lookup_corpus_size"))
    args = parser.parse_args()
    pair = load_pair()
    folder = Path(args.answers).resolve()
    folder = folder.relative_to(ROOT) if folder.is_relative_to(ROOT) else folder
    profile, public = run_answers(pair, ROOT / folder, Path(args.data))
    sets = {"held-apart Magpie": held_apart_answers(args.max_new_tokens, args.every), **public}
    responses, _ = corpus_sequences()
    random.Random(0).shuffle(responses)
    total = sum(map(len, responses))
    results = []
    for fraction in (float(f) for f in args.fractions.split(",")):
        drafter = LookupDrafter(pair.n, pair.target.vocab_size, corpus=corpus_index(responses, fraction))
        row = {"fraction": fraction, "corpus_tokens": round(fraction * total) if fraction < 1 else total, "sets": {}}
        for name, answers in sets.items():
            policy = make_policy("libraspec", pair.n, alpha=args.alpha, d_max=args.d_max)
            runs = [
                replay_greedy(
                    drafter,
                    policy,
                    prompt,
                    output,
                    args.max_new_tokens,
                    profile,
                    lookahead=args.d_max,
                    eos_ids=end_ids(pair),
                )
                for prompt, output in answers
            ]
            row["sets"][name] = regime(runs)
        print(fraction, {k: f"{v['long'] / max(v['judged'], 1):.3f}" for k, v in row["sets"].items()}, flush=True)
        results.append(row)
    names = list(sets)
    lines = [
        f"# Look-up corpus size against d* >= 3 (greedy replay, LibraSpec alpha = {args.alpha:g}, "
        f"d_max = {args.d_max})",
        "",
        f"Embedded pair, look-up drafter, n = {pair.n}; corpora: the first fraction of the corpus's "
        f"{len(responses)} answers ({total} tokens) in a fixed random order. Answer sets: one in "
        f"{args.every} held-apart Magpie answers ({len(sets[names[0]])}), and the target's greedy answers "
        f"to the {sum(map(len, public.values()))} prompts of {', '.join(SUITES)} in the run in {folder}. "
        "Each cell: share of judged rounds with d* >= 3 (judged: a draft was made and room was left) / share "
        "of all rounds (a round without a draft is an AR step), tau in brackets. d* priced with that run's "
        f"profile (AR step {1000 * profile.ar_token_time():.1f} ms).",
        f"Command: `python benchmarks/lookup_corpus_size.py{''.join(' ' + a for a in sys.argv[1:])}`",
        "",
        "| corpus tokens | " + " | ".join(names) + " | public suites pooled |",
        "|---|" + "---|" * (len(names) + 1),
    ]
    for row in results:
        public = [row["sets"][name] for name in SUITES]
        pooled = {key: sum(s[key] for s in public) for key in ("long", "judged", "rounds", "tokens")}
        cells = [
            f"{100 * s['long'] / max(s['judged'], 1):.1f}% / {100 * s['long'] / s['rounds']:.1f}% "
            f"({s['tokens'] / s['rounds']:.2f})"
            for s in [*row["sets"].values(), pooled]
        ]
        lines.append(f"| {row['corpus_tokens']} | " + " | ".join(cells) + " |")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(str(out / "README.md"), "\n".join(lines) + "\n")
    atomic_write_text(
        str(out / "results.json"),
        json.dumps(
            {
                "alpha": args.alpha,
                "d_max": args.d_max,
                "max_new_tokens": args.max_new_tokens,
                "every": args.every,
                "answers": str(folder),
                "profile": profile.to_dict(),
                "results": results,
            },
            indent=1,
        ),
    )
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
