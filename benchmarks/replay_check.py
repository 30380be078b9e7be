"""Replay against the engine on the embedded pair: the share of rounds a trace replays exactly (issue 32).

    python benchmarks/replay_check.py            # resumes from benchmarks/results/replay_check/rounds.jsonl

First `--limit` prompts of GSM8K, HumanEval and MT-Bench (../shared/data), `--max-new-tokens`
tokens, greedy, default settings (`RunSpec()`). For each prompt and drafter: AR decoding
(its measured seconds per token), a trace (`analysis.trace.record_trace`, timed), then the engine
and the replay of each mode, compared round by round on (start position, d, accepted, committed
tokens). A block-diffusion trace takes its features from one forward over the whole text, the
engine from verification forwards, so a replay can part from the engine where two candidates
are nearly tied; the first round that differs is kept with the drafter's probabilities there.
Each finished (suite, prompt, drafter) is a line of the checkpoint; a rerun skips those.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from libraspec.analysis.replay import replay  # noqa: E402
from libraspec.analysis.trace import record_trace  # noqa: E402
from libraspec.engine import DecodeConfig, SpeculativeDecoder  # noqa: E402
from libraspec.models.registry import load_pair  # noqa: E402
from libraspec.modes import MODES  # noqa: E402
from libraspec.paths import read_prompts  # noqa: E402
from libraspec.spec import RunSpec

SUITES = {"gsm8k": "gsm8k_test.jsonl", "humaneval": "humaneval.jsonl", "mtbench": "mt_bench_questions.jsonl"}
MODES_OF = {
    "dflash": ("static", "libraspec", "ddtree", "ddtree-libraspec", "ddtree-marginal", "ddtree-priced"),
    "lookup": ("static", "libraspec"),
    "hybrid": ("static", "libraspec"),
    "fastdllm": ("static", "libraspec"),
    "eagle": ("static", "libraspec", "ddtree"),
}
OUT = ROOT / "benchmarks" / "results" / "replay_check"


def key(r) -> tuple:
    return (r.start_position, r.chosen_length, r.accepted, r.committed_tokens)


def compare(engine, replayed) -> dict:
    equal = sum(1 for a, b in zip(engine, replayed) if key(a) == key(b))
    out = {"rounds": max(len(engine), len(replayed)), "equal": equal}
    first = next((k for k, (a, b) in enumerate(zip(engine, replayed)) if key(a) != key(b)), None)
    if first is None and len(engine) != len(replayed):
        first = min(len(engine), len(replayed))
    if first is not None and first < min(len(engine), len(replayed)):
        a, b = engine[first], replayed[first]
        q_a, q_b = np.asarray(a.confidences), np.asarray(b.confidences)
        k = min(len(q_a), len(q_b))
        split = next((i for i in range(k) if a.draft_tokens[i] != b.draft_tokens[i]), None)
        out["first_difference"] = {
            "round": first,
            "engine": [a.chosen_length, a.accepted],
            "replay": [b.chosen_length, b.accepted],
            "max_q_difference": float(np.max(np.abs(q_a[:k] - q_b[:k]))) if k else 0.0,
            "draft_position_differing": split,
            "q_there": None if split is None else [float(q_a[split]), float(q_b[split])],
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--drafters", default="lookup,dflash,hybrid")
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    checkpoint = out / "rounds.jsonl"
    done = set()
    if checkpoint.exists():
        for line in checkpoint.read_text().splitlines():
            row = json.loads(line)
            done.add((row["suite"], row["prompt"], row["drafter"]))
    pair = load_pair()
    settings, _ = RunSpec().checked(pair.n)
    lookahead = settings.d_max
    for suite, file in SUITES.items():
        for i, text in enumerate(read_prompts(Path(args.data) / file)[: args.limit]):
            prompt = pair.encode_prompt(text)
            for drafter in args.drafters.split(","):
                if (suite, i, drafter) in done:
                    continue
                decoder = SpeculativeDecoder(pair, drafter=drafter)
                config = DecodeConfig.of(RunSpec(max_new_tokens=args.max_new_tokens))
                start = time.perf_counter()
                output = [t for r in decoder.run(prompt, "ar", None, config) for t in r.committed_tokens]
                ar_s = time.perf_counter() - start
                trees = any(MODES[m].kind == "tree" for m in MODES_OF[drafter])
                trace = record_trace(
                    pair,
                    drafter,
                    prompt,
                    output,
                    args.max_new_tokens,
                    lookahead,
                    top_k=settings.node_budget if trees else 1,
                )
                row = {
                    "suite": suite,
                    "prompt": i,
                    "drafter": drafter,
                    "tokens": len(output),
                    "ar_s_per_token": ar_s / len(output),
                    "trace_s_per_token": trace.meta["seconds"] / len(output),
                    "modes": {},
                }
                for mode in MODES_OF[drafter]:
                    engine = list(decoder.run(prompt, mode, MODES[mode].policy(settings, decoder.profile), config))
                    replayed = replay(trace, mode, decoder.profile, settings)
                    row["modes"][mode] = compare(engine, replayed)
                with checkpoint.open("a") as handle:
                    handle.write(json.dumps(row) + "\n")
                print(suite, i, drafter, {m: (v["equal"], v["rounds"]) for m, v in row["modes"].items()}, flush=True)
    summarize(checkpoint, out / "summary.json", args)


def summarize(checkpoint: Path, path: Path, args) -> None:
    rows = [json.loads(line) for line in checkpoint.read_text().splitlines()]
    summary = {"limit": args.limit, "max_new_tokens": args.max_new_tokens, "prompts": len(rows), "drafters": {}}
    for drafter in sorted({r["drafter"] for r in rows}):
        mine = [r for r in rows if r["drafter"] == drafter]
        modes = {}
        for mode in MODES_OF[drafter]:
            parts = [r["modes"][mode] for r in mine if mode in r["modes"]]
            rounds, equal = sum(p["rounds"] for p in parts), sum(p["equal"] for p in parts)
            modes[mode] = {
                "rounds": rounds,
                "equal": equal,
                "share_equal": equal / rounds if rounds else None,
                "runs_with_a_difference": sum("first_difference" in p for p in parts),
                "differences": [
                    dict(p["first_difference"], suite=r["suite"], prompt=r["prompt"])
                    for r in mine
                    for p in [r["modes"].get(mode, {})]
                    if "first_difference" in p
                ],
            }
        summary["drafters"][drafter] = {
            "modes": modes,
            "ar_s_per_token": float(np.mean([r["ar_s_per_token"] for r in mine])),
            "trace_s_per_token": float(np.mean([r["trace_s_per_token"] for r in mine])),
        }
    path.write_text(json.dumps(summary, indent=1) + "\n")
    for drafter, s in summary["drafters"].items():
        print(drafter, {m: round(v["share_equal"], 4) for m, v in s["modes"].items()}, s["trace_s_per_token"])


if __name__ == "__main__":
    main()
