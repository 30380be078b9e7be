"""Iterative unmasking against one pass, same weights, on the held-out prompts (issue 46, part 1).

    python benchmarks/iterative_drafter.py      # resumes from benchmarks/results/iterative/prompts.jsonl

The first `--prompts` prompts of assets/heldout_prompts.jsonl (kept apart from training, never the
public suites), greedy, `--max-new-tokens` tokens. Per prompt: the target's greedy output (AR),
then a trace of the single-pass block drafter (dflash) and of the iterative one (fastdllm, the same
module, threshold 0.9) over it, and replays of static d = n and 2n and LibraSpec (default settings)
under this machine's cached latency profile. Reported per drafter: a_1 (the first draft equals the
output, over every anchor), passes per block, tau, and the modeled speedup over AR with a 95%
bootstrap interval over prompts. Every figure is **modeled by replay**: the rounds are exact
(greedy), their seconds come from the profile, which prices every iterative pass as a
block-diffusion pass. One line per finished prompt is the checkpoint; a rerun skips those.
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

from libraspec.analysis.replay import replay  # noqa: E402
from libraspec.analysis.trace import record_trace  # noqa: E402
from libraspec.drafters.iterative import THRESHOLD  # noqa: E402
from libraspec.engine import DecodeConfig, SpeculativeDecoder  # noqa: E402
from libraspec.experiments.provenance import cpu_clock, others_share  # noqa: E402
from libraspec.experiments.stats import resample_indices  # noqa: E402
from libraspec.files import atomic_write_text  # noqa: E402
from libraspec.models.registry import load_pair  # noqa: E402
from libraspec.records import committed_text  # noqa: E402
from libraspec.spec import RunSpec  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "iterative"
DRAFTERS = ("dflash", "fastdllm")


def runs_of(n: int) -> dict[str, tuple[str, RunSpec]]:
    return {
        f"static {n}": ("static", RunSpec(static_length=n)),
        f"static {2 * n}": ("static", RunSpec(static_length=2 * n)),
        "libraspec": ("libraspec", RunSpec()),
    }


def measure(pair, prompt: list[int], max_new: int) -> dict:
    decoder = SpeculativeDecoder(pair, drafter="dflash")
    profile, n = decoder.profile, pair.n
    output = committed_text(decoder.run(prompt, "ar", None, DecodeConfig(max_new_tokens=max_new)))
    row = {"tokens": len(output), "drafters": {}}
    for drafter in DRAFTERS:
        trace = record_trace(pair, drafter, prompt, output, max_new, lookahead=2 * n)
        first = [int(trace.tokens[g, 0] == output[g]) for g in range(len(output)) if not trace.empty[g]]
        passes = [
            1 + sum(1 for k, _ in trace.discarded[g] if k == b)
            for g in range(len(output))
            for b in range(trace.steps[g])
        ]
        runs = {}
        for label, (mode, spec) in runs_of(n).items():
            records = replay(trace, mode, profile, spec)
            runs[label] = {
                "tokens": sum(r.tau for r in records),
                "rounds": len(records),
                "modeled_s": records[-1].cumulative_modeled_s,
                "ar_modeled_s": sum(  # AR's modeled seconds for the same tokens, each after its own context
                    profile.ar_token_time(r.start_position + j) for r in records for j in range(r.tau)
                ),
            }
        row["drafters"][drafter] = {
            "first_accepted": sum(first),
            "anchors": len(first),
            "passes": sum(passes),
            "blocks": len(passes),
            "trace_s": trace.meta["seconds"],
            "runs": runs,
        }
    return row


def summarize(rows: list[dict], n: int) -> dict:
    draws = resample_indices([0] * len(rows), 2000, 0)  # (R, P)
    out = {}
    for drafter in DRAFTERS:
        mine = [r["drafters"][drafter] for r in rows]
        entry = {
            "a_1": sum(m["first_accepted"] for m in mine) / sum(m["anchors"] for m in mine),
            "passes_per_block": sum(m["passes"] for m in mine) / sum(m["blocks"] for m in mine),
            "runs": {},
        }
        for label in runs_of(n):
            runs = [m["runs"][label] for m in mine]
            tokens = np.array([r["tokens"] for r in runs], dtype=float)
            spent = np.array([r["modeled_s"] for r in runs], dtype=float)
            ar = np.array([r["ar_modeled_s"] for r in runs], dtype=float)
            ratio = ar[draws].sum(1) / spent[draws].sum(1)  # (R,) speedup: same tokens, AR's seconds over the mode's
            entry["runs"][label] = {
                "tau": tokens.sum() / sum(r["rounds"] for r in runs),
                "speedup": float(ar.sum() / spent.sum()),
                "interval": [float(v) for v in np.percentile(ratio, (2.5, 97.5))],
            }
        out[drafter] = entry
    return out


def table(summary: dict, meta: dict) -> str:
    lines = [
        "# Iterative unmasking (fastdllm) against one pass (dflash): same weights, held-out prompts",
        "",
        f"Made by `python benchmarks/iterative_drafter.py`: {meta['prompts']} held-out prompts "
        f"(assets/heldout_prompts.jsonl), greedy, at most {meta['max_new_tokens']} new tokens, "
        f"threshold {meta['threshold']}, n = {meta['n']}. **Modeled by replay** under this machine's "
        f"latency profile (every pass priced as a block-diffusion pass); other processes used "
        f"{meta['other_cpu']:.1%} of the CPU during the run.",
        "",
        "| drafter | a_1 | passes per block | run | tau | modeled speedup over AR (95% interval) |",
        "|---|---|---|---|---|---|",
    ]
    for drafter, entry in summary.items():
        for label, run in entry["runs"].items():
            low, high = run["interval"]
            lines.append(
                f"| {drafter} | {entry['a_1']:.3f} | {entry['passes_per_block']:.2f} | {label} | "
                f"{run['tau']:.3f} | {run['speedup']:.3f} ({low:.3f}-{high:.3f}) |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    checkpoint = out / "prompts.jsonl"
    rows = [json.loads(line) for line in checkpoint.read_text().splitlines()] if checkpoint.exists() else []
    pair = load_pair()
    texts = [
        json.loads(line)["prompt"] for line in (ROOT / "assets" / "heldout_prompts.jsonl").read_text().splitlines()
    ]
    start = cpu_clock()
    for i, text in enumerate(texts[: args.prompts]):
        if i < len(rows):
            continue
        row = {"prompt": i, **measure(pair, pair.encode_prompt(text), args.max_new_tokens)}
        with checkpoint.open("a") as handle:
            handle.write(json.dumps(row) + "\n")
        rows.append(row)
        print(i, {d: v["passes"] / v["blocks"] for d, v in row["drafters"].items()}, flush=True)
    meta = {
        "prompts": len(rows),
        "max_new_tokens": args.max_new_tokens,
        "threshold": THRESHOLD,
        "n": pair.n,
        "other_cpu": others_share(start, cpu_clock()) or 0.0,
    }
    summary = summarize(rows, pair.n)
    atomic_write_text(str(out / "summary.json"), json.dumps({"meta": meta, "drafters": summary}, indent=1))
    atomic_write_text(str(out / "README.md"), table(summary, meta))
    print(table(summary, meta))


if __name__ == "__main__":
    main()
