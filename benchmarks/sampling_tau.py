"""Tokens per round (tau) of LibraSpec when sampling, on the embedded pair: what lossless drafting
costs in acceptance (issue 31). tau does not depend on timing, so load does not change it.

    python benchmarks/sampling_tau.py --drafter dflash --out benchmarks/results/sampling_tau/after_dflash.json

First `--limit` prompts of GSM8K, HumanEval and MT-Bench (../shared/data), `--max-new-tokens`
tokens each, temperature 1, seed = prompt index, LibraSpec with RunSpec' d_max and alpha
(or `--alpha`).
tau = tokens committed / rounds, pooled over prompts; the share of rounds whose d reached past
the first drafting step is beside it, since only those positions are drafted differently.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from libraspec.engine import DecodeConfig, SpeculativeDecoder  # noqa: E402
from libraspec.models.registry import load_pair  # noqa: E402
from libraspec.modes import make_policy  # noqa: E402
from libraspec.paths import read_prompts  # noqa: E402
from libraspec.spec import RunSpec

SUITES = {"gsm8k": "gsm8k_test.jsonl", "humaneval": "humaneval.jsonl", "mtbench": "mt_bench_questions.jsonl"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--drafter", default="dflash")
    parser.add_argument("--limit", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--alpha", type=float, default=RunSpec.alpha, help="LibraSpec's alpha")
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    pair = load_pair()
    decoder = SpeculativeDecoder(pair, drafter=args.drafter)
    settings = RunSpec(alpha=args.alpha)
    result = {
        "drafter": args.drafter,
        "alpha": settings.alpha,
        "d_max": settings.d_max,
        "limit": args.limit,
        "max_new_tokens": args.max_new_tokens,
        "temperature": args.temperature,
        "suites": {},
    }
    start = time.time()
    for suite, file in SUITES.items():
        rounds = committed = past_first = 0
        for i, prompt in enumerate(read_prompts(Path(args.data) / file)[: args.limit]):
            policy = make_policy("libraspec", pair.n, alpha=settings.alpha, d_max=settings.d_max)
            config = DecodeConfig.of(RunSpec(max_new_tokens=args.max_new_tokens, temperature=args.temperature, seed=i))
            for record in decoder.run(pair.encode_prompt(prompt), "libraspec", policy, config):
                rounds += 1
                committed += len(record.committed_tokens)
                past_first += record.chosen_length > pair.n
        result["suites"][suite] = {
            "rounds": rounds,
            "tokens": committed,
            "tau": committed / rounds,
            "share_d_past_n": past_first / rounds,
        }
        print(suite, result["suites"][suite], flush=True)
    total_rounds = sum(s["rounds"] for s in result["suites"].values())
    result["pooled_tau"] = sum(s["tokens"] for s in result["suites"].values()) / total_rounds
    result["seconds"] = round(time.time() - start, 1)
    print("pooled tau", round(result["pooled_tau"], 4))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
