"""The table of mode vllm-schedule (vLLM's batch-size schedule, PR #32374): for each batch-size range,
the static K that minimises the modeled time of lock-step groups of that size, chosen on prompts
held apart from every evaluation suite. Writes assets/batch_schedule.json.

    python benchmarks/batch_schedule.py            # 32 held-apart prompts x 128 tokens, measured forwards
    python benchmarks/batch_schedule.py --quick    # 2 prompts x 24 tokens, synthetic forwards: a smoke run

1. Prompts: the first --limit (default 32) of assets/heldout_prompts.jsonl: never trained on (the
   drafter's training monitor reads prompts 1-32; the drafter evaluation's `heldout` suite is
   33-64), and never one of the suites BENCHMARKS.md judges rules on (../shared/data is not read).
2. Traces (`analysis.trace.record_trace`): --drafter's proposals from every position of each
   prompt's greedy AR text, K_max = 2n drafts deep; cached per prompt under the cache folder.
3. For each range [lo, hi] of RANGES, the group sizes B of BATCHES within it (1; 2 and 4; 8): the
   prompts in lock-step groups of B (`analysis.regimes.lockstep`: one forward over the group a
   round, priced --batching), each request static K = 1..K_max; the K with the least modeled
   seconds summed over the range's group sizes wins (every K commits the same tokens, so that is
   the K with the best modeled speedup over AR). Fewer prompts than B fill a group cyclically.
   Forwards: measured at B = 1, 2, 4, 8 on this machine (`profiling.cached_concurrency`, which
   times them when the cache has none); --synthetic (and --quick): t0 + c B k per forward of B
   sequences of k rows, made-up numbers for a smoke run that times nothing.

vLLM's K = 0 (no drafting at all) is not a candidate: a round here always drafts its first block.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from libraspec.analysis.regimes import describe, lockstep, synthetic_profile  # noqa: E402
from libraspec.analysis.trace import DraftTrace, record_trace  # noqa: E402
from libraspec.engine import DecodeConfig, SpeculativeDecoder  # noqa: E402
from libraspec.experiments.provenance import git_state  # noqa: E402
from libraspec.files import atomic_write_text  # noqa: E402
from libraspec.models.registry import load_pair  # noqa: E402
from libraspec.paths import ASSETS, cache_root, read_prompts  # noqa: E402
from libraspec.serving.vllm import SCHEDULE_PATH, load_schedule  # noqa: E402
from libraspec.spec import RunSpec  # noqa: E402
from libraspec.train.prompts import MONITOR_PROMPTS  # noqa: E402

RANGES = ((1, 1), (2, 4), (5, 8))  # inclusive batch-size ranges, as vLLM's schedule writes them
BATCHES = (1, 2, 4, 8)  # group sizes whose forwards `profiling.cached_concurrency` measures
PROMPTS = ASSETS / "heldout_prompts.jsonl"
# --synthetic: an AR step of this CPU after 256 tokens (docs/ARCHITECTURE.md), each row of each
# sequence 1/64 of it, a drafting step 5 ms (a dflash pass here: 4.9 ms). Made up, never measured.
SYNTHETIC_T0, SYNTHETIC_ROW, SYNTHETIC_DRAFT = 0.046, 0.046 / 64, 0.005


def arguments():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=MONITOR_PROMPTS, help="held-apart prompts (from the first)")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--drafter", default="dflash")
    parser.add_argument("--k-max", type=int, default=0, help="largest K tried (0: 2n)")
    parser.add_argument("--batching", default="padded", help="how a lock-step forward is priced (padded, ragged)")
    parser.add_argument("--synthetic", action="store_true", help="synthetic forwards: nothing is timed")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=str(SCHEDULE_PATH))
    parser.add_argument("--quick", action="store_true", help="2 prompts, 24 tokens, synthetic forwards")
    args = parser.parse_args()
    if args.quick:
        args.limit, args.max_new_tokens, args.synthetic = 2, 24, True
    return args


def synthetic_concurrency(n: int, max_tokens: int) -> dict:
    """{B: a forward of B sequences of k rows costs t0 + c B k} (made-up numbers, module docstring)."""
    out = {}
    for B in BATCHES:
        profile = synthetic_profile(SYNTHETIC_T0, SYNTHETIC_ROW * B, SYNTHETIC_DRAFT, n, max_tokens)
        out[B] = dataclasses.replace(profile, meta=profile.meta | {"batch": B})
    return out


def traces_for(args, pair, k_max: int, profile) -> list[DraftTrace]:
    """One trace per prompt, recorded once and then read from the cache folder."""
    key = f"{pair.name}-{pair.drafter_id[:16]}-{args.drafter}-{args.max_new_tokens}-{k_max}".replace(":", "")
    folder = Path(cache_root()) / "batch_schedule" / key
    folder.mkdir(parents=True, exist_ok=True)
    decoder = SpeculativeDecoder(pair, profile, drafter=args.drafter)  # AR's text needs no price
    out = []
    for i, text in enumerate(read_prompts(PROMPTS)[: args.limit]):
        path = folder / f"heldout-{i:02d}.npz"
        if not path.exists():
            prompt = pair.encode_prompt(text)
            config = DecodeConfig.of(RunSpec(max_new_tokens=args.max_new_tokens))
            output = [t for r in decoder.run(prompt, "ar", None, config) for t in r.committed_tokens]
            record_trace(pair, args.drafter, prompt, output, args.max_new_tokens, k_max).save(path)
            print(f"traced held-apart prompt {i + 1}", flush=True)
        out.append(DraftTrace.load(path))
    return out


def groups_of(traces: list, B: int) -> list[list]:
    """Consecutive groups of B traces covering every trace once, the list repeated where it runs out."""
    count = -(-len(traces) // B)
    return [[traces[(g * B + j) % len(traces)] for j in range(B)] for g in range(count)]


def choose(traces, profiles, k_max: int, batching: str) -> tuple[list[list[int]], dict]:
    """The ranges [lo, hi, K] and, per range, K -> modeled speedup over AR (ratio of sums)."""
    ranges, scores = [], {}
    for lo, hi in RANGES:
        sizes = [B for B in BATCHES if lo <= B <= hi]
        seconds, ar = {}, 0.0
        for K in range(1, k_max + 1):
            settings = RunSpec(static_length=K, d_max=max(K, RunSpec.d_max))
            runs = [
                lockstep(group, "static", profiles, settings, batching=batching)
                for B in sizes
                for group in groups_of(traces, B)
            ]
            seconds[K] = sum(run.seconds for run in runs)
            ar = sum(run.ar_seconds for run in runs)  # the same for every K
        best = min(seconds, key=seconds.get)  # the smallest K among equal times
        ranges.append([lo, hi, best])
        scores[f"{lo}-{hi}"] = {str(K): round(ar / s, 4) for K, s in seconds.items()}
        print(f"batch {lo}-{hi} (groups of {sizes}): K = {best}, {ar / seconds[best]:.3f}x over AR", flush=True)
    return ranges, scores


def main() -> None:
    args = arguments()
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    pair = load_pair()
    n = pair.n
    k_max = args.k_max or 2 * n
    if args.synthetic:
        profiles = synthetic_concurrency(n, k_max + 2)
    else:
        from libraspec.profiling import cached_concurrency

        profiles = cached_concurrency(pair, batches=BATCHES, max_tokens=max(25, k_max + 1))
    traces = traces_for(args, pair, k_max, profiles[1])
    ranges, scores = choose(traces, profiles, k_max, args.batching)
    git = git_state()
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    forwards = (
        f"synthetic forwards ({describe(profiles[1])}, each row x B at batch B; nothing timed)"
        if args.synthetic
        else f"forwards measured on this machine at B = {', '.join(map(str, BATCHES))} ({describe(profiles[1])})"
    )
    chosen_on = (
        f"{len(traces)} held-apart prompts (assets/heldout_prompts.jsonl, the first {len(traces)}) x "
        f"{args.max_new_tokens} tokens, {args.drafter} drafter of pair {pair.name}, {forwards}, "
        f"{args.batching} lock-step; {when}, commit {(git.get('commit') or '?')[:10]}"
        + (" with local changes" if git.get("dirty") else "")
    )
    if args.quick:
        chosen_on = (
            "QUICK PROVISIONAL RUN (python benchmarks/batch_schedule.py --quick): not a choice to rely on; "
            "the full run replaces it. " + chosen_on
        )
    table = {
        "ranges": ranges,
        "chosen_on": chosen_on,
        "how": (
            f"for each batch-size range the static K = 1..{k_max} with the least modeled seconds of lock-step "
            f"groups of each measured size B in the range ({', '.join(map(str, BATCHES))}), summed over them; "
            "prompts held apart from every evaluation suite (python benchmarks/batch_schedule.py)"
        ),
        "speedup_by_k": scores,  # per range, K -> modeled speedup over AR of its groups
        "command": "python benchmarks/batch_schedule.py " + " ".join(sys.argv[1:]),
        "minutes": round((time.perf_counter() - started) / 60, 2),
    }
    atomic_write_text(args.out, json.dumps(table, indent=1) + "\n")
    load_schedule(args.out)  # the file reads back as the mode reads it
    print(f"wrote {args.out}: {ranges}", flush=True)


if __name__ == "__main__":
    main()
