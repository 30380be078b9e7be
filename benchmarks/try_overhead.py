"""The overhead of a try in the app: a race's wall time against its modes' own decoding (issue 34).

    python benchmarks/try_overhead.py        # the app's example prompts, on the embedded pair

A try is what pressing Run race costs a visitor: `ui.races.Races.stream` from the call to its
last snapshot. The modes' own decoding is the sum of their rounds' measured seconds (drafting,
policy, verification); the overhead is the rest: the AR baseline (decoded once per prompt and
settings, then cached), the profile check against it, the prefills, the records and snapshots.
Each example prompt is raced twice with the same settings: the first try decodes the AR baseline,
the second finds it cached. Writes benchmarks/results/try_overhead/README.md and results.json.
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

from libraspec.experiments.provenance import git_state, load_average  # noqa: E402
from libraspec.files import atomic_write_text  # noqa: E402
from libraspec.paths import read_examples  # noqa: E402
from libraspec.spec import RunSpec  # noqa: E402
from ui.session import Session  # noqa: E402


def one_try(session: Session, prompt: str, settings: RunSpec, drafter: str | None) -> dict:
    start = time.perf_counter()
    run = None
    for snapshot in session.races.stream(prompt, settings, "bench", drafter):
        run = snapshot.run or run
    total = time.perf_counter() - start
    decoding = sum(r.measured_s for mode in run.modes for r in run.records.get(mode, []))
    return {"total_s": total, "decoding_s": decoding, "overhead_s": total - decoding, "finished": run.finished}


def table(rows: list[dict], run: str) -> list[str]:
    """One table row per kind of try ("first": the AR baseline decoded; "again": cached) of a run."""
    out = []
    for attempt in ("first", "again"):
        mine = [r for r in rows if r["try"] == attempt]
        total, decoding = sum(r["total_s"] for r in mine), sum(r["decoding_s"] for r in mine)
        ratios = [r["overhead_s"] / r["decoding_s"] for r in mine]
        out.append(
            f"| {run} | {attempt} | {len(mine)} | {total:.1f} | {decoding:.1f} | {total - decoding:.1f} | "
            f"{(total - decoding) / decoding:.2f} (per try {min(ratios):.2f}-{max(ratios):.2f}) |"
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--drafter", default="", help='"" = the pair\'s default')
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "try_overhead"))
    parser.add_argument(
        "--before", default="", help="an earlier run's results.json: its table is written beside this run's"
    )
    args = parser.parse_args()
    before = json.loads(Path(args.before).read_text()) if args.before else None
    torch.set_num_threads(args.threads)
    load_before = load_average()
    session = Session()
    for _ in session.load():
        pass
    settings = RunSpec(max_new_tokens=args.max_new_tokens, temperature=0.0)
    rows = []
    for example in read_examples():
        for attempt in ("first", "again"):
            row = one_try(session, example["prompt"], settings, args.drafter or None)
            rows.append(row | {"prompt": example["prompt"][:50], "try": attempt})
            print(rows[-1], flush=True)
    lines = [
        "# The overhead of a try",
        "",
        f"`python benchmarks/try_overhead.py {' '.join(sys.argv[1:])}`: every example prompt of the app raced "
        f"twice (static, LibraSpec, oracle; {args.max_new_tokens} new tokens, greedy, drafter "
        f"{args.drafter or 'the pair default'}) on {session.describe()}; load average before "
        f"{load_before:.2f}, after {load_average():.2f}; commit `{git_state()['commit']}`"
        f"{' (uncommitted changes)' if git_state()['dirty'] else ''}.",
        "A try's wall time (the call to its last snapshot) against its modes' own decoding (the sum of "
        "their rounds' measured seconds); the overhead is the rest (the AR baseline, decoded on a prompt's "
        "first try and cached after, the profile check, prefills, records).",
        "",
        "| run | try | tries | total s | modes' decoding s | overhead s | overhead / decoding |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += table(rows, "this run")
    if before is not None:
        lines += table(before["rows"], f"before: commit `{before.get('commit', '?')}`")
        lines += [
            "",
            "The goal (issue 45): a try with the AR baseline cached ('again') at most 1.5x its modes' decoding.",
        ]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    state = git_state()
    payload = {"rows": rows, "args": vars(args), "commit": state["commit"], "dirty": state["dirty"]}
    atomic_write_text(str(out / "results.json"), json.dumps(payload, indent=1) + "\n")
    atomic_write_text(str(out / "README.md"), "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
