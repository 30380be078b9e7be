"""Where a row's measured time goes, round by round, beside the profile's price of the same rounds.

    python benchmarks/round_parts.py     # writes benchmarks/results/table1/round_parts.md

Table 1's measured check (benchmarks/table1.py) finds the adaptive rules on dflash measured below
their modeled speedup at temperature 1 while static d = 3 stays above. This decodes the first
--prompts prompts of GSM8K and of HumanEval (../shared/data, read at run time), --repeats times
each, greedy and at temperature 1 (seed = the prompt's index), for the rows named, and sums
each row's rounds: wall clock, the measured drafting, policy and verification seconds, the modeled
seconds of the same rounds, rounds and tokens; then verification per round and measured over
modeled. Timings: run it idle; the load is written beside the table.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from table1 import configs, decode_row  # noqa: E402

from libraspec.engine import SpeculativeDecoder  # noqa: E402
from libraspec.experiments.provenance import cpu_clock, git_state, others_share  # noqa: E402
from libraspec.files import atomic_write_text  # noqa: E402
from libraspec.models.registry import load_pair  # noqa: E402
from libraspec.paths import PUBLIC_DATA, read_prompts  # noqa: E402

ROWS = ("static d=3", "LibraSpec alpha=2 d_max=60", "G4")
PARTS = ("wall_s", "draft_s", "policy_s", "verify_s", "modeled_s", "rounds", "tokens", "sum_d")


def parts(decoder, prompt, config, temperature: float, seed: int, max_new_tokens: int) -> dict[str, float]:
    """One decode of `prompt` by `config` (a Table 1 row): its rounds' sums and its wall clock."""
    records, wall = decode_row(decoder, prompt, config, temperature, seed, max_new_tokens)
    return {
        "wall_s": wall,
        "draft_s": sum(r.draft_s for r in records),
        "policy_s": sum(r.policy_s for r in records),
        "verify_s": sum(r.verify_s for r in records),
        "modeled_s": sum(r.modeled_s for r in records),
        "rounds": len(records),
        "tokens": sum(r.tau for r in records),
        "sum_d": sum(r.chosen_length for r in records),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--drafter", default="dflash")
    parser.add_argument("--prompts", type=int, default=2, help="from each of GSM8K and HumanEval")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "table1" / "round_parts.md"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    clock, code = cpu_clock(), git_state()
    pair = load_pair()
    decoder = SpeculativeDecoder(pair, drafter=args.drafter)
    rows = {config.label: config for config in configs() if config.label in ROWS}
    texts = [
        text
        for file in ("gsm8k_test.jsonl", "humaneval.jsonl")
        for text in read_prompts(PUBLIC_DATA / file)[: args.prompts]
    ]
    prompts = [pair.encode_prompt(text) for text in texts]
    totals: dict[tuple[float, str], dict[str, float]] = {}
    for temperature in (0.0, 1.0):
        for _ in range(args.repeats):
            for seed, prompt in enumerate(prompts):
                for label, config in rows.items():
                    one = parts(decoder, prompt, config, temperature, seed, args.max_new_tokens)
                    total = totals.setdefault((temperature, label), dict.fromkeys(PARTS, 0.0))
                    for key in PARTS:
                        total[key] += one[key]
    lines = [
        "# Where a row's measured time goes, beside the profile's price of the same rounds",
        "",
        "`python benchmarks/round_parts.py" + "".join(f" {a}" for a in sys.argv[1:]) + "`",
        "",
        f"Drafter {args.drafter}; the first {args.prompts} prompts of GSM8K and of HumanEval, each decoded "
        f"{args.repeats} times per row, {args.max_new_tokens} tokens, greedy and at temperature 1 (seed = the "
        f"prompt's index), {args.threads} threads. Sums over every decode of a row; measured / modeled is the "
        "rounds' drafting, policy and verification seconds over the profile's price of the same rounds. Code "
        f"{(code['commit'] or '?')[:7]}{' with uncommitted changes' if code['dirty'] else ''}; other "
        f"processes used {others_share(clock, cpu_clock()) or 0.0:.0%} of the CPU over the run.",
        "",
        "| temperature | row | wall s | draft s | policy s | verify s | modeled s | rounds | tokens | mean d "
        "| verify ms a round | measured / modeled |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (temperature, label), t in totals.items():
        measured = t["draft_s"] + t["policy_s"] + t["verify_s"]
        lines.append(
            f"| {temperature:g} | {label} | {t['wall_s']:.2f} | {t['draft_s']:.2f} | {t['policy_s']:.3f} "
            f"| {t['verify_s']:.2f} | {t['modeled_s']:.2f} | {t['rounds']:.0f} | {t['tokens']:.0f} "
            f"| {t['sum_d'] / t['rounds']:.2f} | {1e3 * t['verify_s'] / t['rounds']:.1f} "
            f"| {measured / t['modeled_s']:.2f} |"
        )
    atomic_write_text(args.out, "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
