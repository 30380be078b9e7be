"""Evaluate the embedded drafter with the real engine on held-out or public prompts (greedy).

    python -m libraspec.train.evaluate --prompts assets/heldout_prompts.jsonl --limit 8 \
        --max-new-tokens 128 [--drafter assets/drafter] [--out runs/eval]
    python -m libraspec.train.evaluate --suites gsm8k,humaneval,mtbench,math500,heldout --limit 16

`--suites` evaluates each suite in turn (public ones read at run time from ../shared/data, see
`paths.suite_path`; `heldout` = held-out prompts 33-64, the ones the training
monitor, which picks the checkpoint, never reads) into OUT/SUITE/ and writes OUT/README.md, one
row per suite plus all suites pooled.

For each prompt, in one process on one machine: AR, static d = n, static d = d_max
(acceptance by draft position 1..d_max, second drafter pass included) and LibraSpec
(alpha, d_max; Algorithm 1). Reported:

- tau (tokens committed per round, accepted + 1) of static n, static d_max and LibraSpec;
- a_i = P(draft i accepted | i submitted), i = 1..d_max, from the static d_max rounds;
- calibration of q_i: a draft token i is judged when every draft before it was accepted
  (i <= accepted + 1); it is correct when i <= accepted. Reliability table over the equal
  q bins of `libraspec.analysis.calibration` and ECE = sum_b (N_b / N) |mean q_b - accuracy_b|;
- drafter pass cost as a fraction of one target verification of n + 1 tokens (measured
  rounds of static n: draft_s / blocks over verify_s; and the latency profile's ratio);
- wall-clock tokens/s of every mode and the measured speedup over AR.

Writes OUT/eval.json and OUT/eval.md. A progress bar goes to stderr. Only dflash is judged:
this evaluates the trained block drafter, not the look-up or hybrid ones.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from ..analysis.calibration import (
    BINS,
    acceptance_by_position,
    acceptance_samples,
    expected_calibration_error,
    reliability_table,
)
from ..files import atomic_write_text
from ..modes import AR, BASELINE, PAPER
from ..paths import ASSETS, read_prompts, suite_path
from ..records import committed_text
from ..spec import RunSpec


def drafter_calibration(records, d_max: int) -> dict:
    """JSON-ready calibration of `records` (`libraspec.analysis.calibration` does the counting).

    acceptance_by_position: a_i for i = 1..d_max over every submitted draft, None where no
    round submitted draft i; reliability (non-empty bins) and ece: over the judged drafts.
    """
    positions = acceptance_by_position(acceptance_samples(records)).set_index("position")["acceptance"]
    judged = acceptance_samples(records, tested_only=True)
    table = reliability_table(judged["q"], judged["accepted"])
    ece = expected_calibration_error(judged["q"], judged["accepted"])
    return {
        "acceptance_by_position": [
            round(float(positions[i]), 4) if i in positions.index else None for i in range(1, d_max + 1)
        ],
        "reliability": [
            {
                "bin": f"{lo:.1f}-{hi:.1f}",
                "count": int(count),
                "mean_q": round(float(q), 4),
                "accept": round(float(accepted), 4),
            }
            for lo, hi, count, q, accepted in table.itertuples(index=False)
            if count
        ],
        "ece": round(ece, 4) if math.isfinite(ece) else None,
    }


def static_label(length: int) -> str:
    """The label of the baseline (static) run at d = `length`: static_4."""
    return f"{BASELINE}_{length}"


def run_modes(pair, prompts: list[str], max_new_tokens: int, alpha: float, d_max: int, on_prompt=None) -> dict:
    """Every mode on every prompt (`driver.decode_grid`, prompt by prompt); `on_prompt(result, done)`
    is called after each prompt (partial results)."""
    from ..engine import DecodeConfig, SpeculativeDecoder
    from ..experiments.driver import decode_grid, mode_job

    decoder = SpeculativeDecoder(pair, drafter="dflash")  # the trained block drafter is what is judged
    n = decoder.n
    config = DecodeConfig.of(RunSpec(max_new_tokens=max_new_tokens, d_max=d_max))
    jobs = {}  # by label: with d_max = n the two static labels are one job
    for label, mode, settings in (
        (AR, AR, RunSpec()),
        (static_label(n), BASELINE, RunSpec(static_length=n)),
        (static_label(d_max), BASELINE, RunSpec(static_length=d_max)),
        (PAPER, PAPER, RunSpec(alpha=alpha, d_max=d_max)),
    ):
        jobs[label] = mode_job(label, mode, settings.checked(n).spec, config)
    records = {label: [] for label in jobs}
    last = list(jobs)[-1]
    outputs = {}
    bar = tqdm(total=len(prompts) * len(jobs), unit="run", file=sys.stderr)
    for event in decode_grid(decoder, [pair.encode_prompt(text) for text in prompts], list(jobs.values())):
        records[event.label].extend(event.records)
        outputs[event.label] = committed_text(event.records)
        bar.update(1)
        if event.label != last:
            continue
        if any(out != outputs[AR] for out in outputs.values()):
            raise RuntimeError(f"greedy speculative output differs from AR on prompt {prompts[event.index][:60]!r}")
        if on_prompt is not None:
            on_prompt({"records": records, "profile": decoder.profile, "n": n}, event.index + 1)
    bar.close()
    return {"records": records, "profile": decoder.profile, "n": n}


def summarize_eval(result: dict, alpha: float, d_max: int) -> dict:
    records, profile, n = result["records"], result["profile"], result["n"]
    static_n, static_max = records[static_label(n)], records[static_label(d_max)]
    ar_s_per_tok = sum(r.measured_s for r in records[AR]) / sum(r.tau for r in records[AR])
    modes = {}
    for name, recs in records.items():
        tokens, seconds = sum(r.tau for r in recs), sum(r.measured_s for r in recs)
        modes[name] = {
            "tokens": tokens,
            "rounds": len(recs),
            "tau": round(tokens / len(recs), 4),
            "wall_s": round(seconds, 3),
            "tokens_per_s": round(tokens / seconds, 3),
            "speedup_measured": round(ar_s_per_tok / (seconds / tokens), 4),
            "mean_d": round(float(np.mean([r.chosen_length for r in recs])), 3),
        }
    passes = [r.draft_s / r.blocks_drafted for r in static_n if r.blocks_drafted]
    verifies = [r.verify_s for r in static_n if r.chosen_length == n]
    return {
        "n": n,
        "alpha": alpha,
        "d_max": d_max,
        "tau_static_n": modes[static_label(n)]["tau"],
        **drafter_calibration(static_max, d_max),
        "drafter_pass_s": round(float(np.median(passes)), 5) if passes else None,
        "verify_n_plus_1_s": round(float(np.median(verifies)), 5) if verifies else None,
        "pass_over_verify_measured": round(float(np.median(passes) / np.median(verifies)), 4)
        if passes and verifies
        else None,
        "pass_over_verify_profile": round(profile.draft_time(1) / profile.verify_time(n + 1), 4),
        "profile": profile.to_dict(),
        "modes": modes,
    }


def to_markdown(s: dict, prompts: int, max_new_tokens: int, source: str = "held-out") -> str:
    n, d_max = s["n"], s["d_max"]
    lines = [
        f"# Drafter evaluation ({prompts} {source} prompts, greedy, {max_new_tokens} new tokens)",
        "",
        f"- mean tau, static d = n = {n}: **{s['tau_static_n']}**",
        f"- ECE of q_i (static d = {d_max} rounds, {BINS} bins): **{s['ece']}**",
        f"- drafter pass / verification of n+1 = {n + 1} tokens: measured **{s['pass_over_verify_measured']}**"
        f" ({s['drafter_pass_s']} s / {s['verify_n_plus_1_s']} s), profile {s['pass_over_verify_profile']}",
        "",
        "| mode | tokens | rounds | tau | mean d | tokens/s | speedup vs AR |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, m in s["modes"].items():
        lines.append(
            f"| {name} | {m['tokens']} | {m['rounds']} | {m['tau']} | {m['mean_d']} | "
            f"{m['tokens_per_s']} | {m['speedup_measured']} |"
        )
    lines += [
        "",
        f"Acceptance by draft position (static d = {d_max}; positions > {n} come from the second pass):",
        "",
        "| i | " + " | ".join(str(i) for i in range(1, d_max + 1)) + " |",
        "|---|" + "---|" * d_max,
        "| a_i | " + " | ".join("-" if a is None else f"{a:.3f}" for a in s["acceptance_by_position"]) + " |",
        "",
        "Reliability of q_i:",
        "",
        "| q bin | count | mean q | accepted |",
        "|---|---|---|---|",
    ]
    lines += [f"| {r['bin']} | {r['count']} | {r['mean_q']} | {r['accept']} |" for r in s["reliability"]]
    return "\n".join(lines) + "\n"


def suite_table(summaries: dict[str, dict], pooled: dict) -> str:
    """One row per suite (and the pool): a_1, a_2, tau at d = n, ECE, drafter cost share and speedups."""
    lines = [
        "| suite | prompts | a_1 | a_2 | tau (d = n) | ECE | pass / verify(n+1) | LibraSpec speedup | "
        "best static speedup |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s in {**summaries, "all": pooled}.items():
        a = s["acceptance_by_position"]
        static = {k: s["modes"][k] for k in (static_label(s["n"]), static_label(s["d_max"]))}
        best = max(static, key=lambda k: static[k]["speedup_measured"])
        lines.append(
            f"| {name} | {s['prompts']} | {a[0]:.3f} | {a[1]:.3f} | {s['tau_static_n']:.3f} | {s['ece']} | "
            f"{s['pass_over_verify_measured']} | {s['modes'][PAPER]['speedup_measured']:.3f}x | "
            f"{static[best]['speedup_measured']:.3f}x ({best.replace('_', ' d = ')}) |"
        )
    return "\n".join(lines) + "\n"


def suite_prompts(name: str) -> tuple[str, list[str]]:
    """(source, prompts) of a suite name: `heldout` (held-out prompts after the training monitor's),
    a public set or a project suite (paths.suite_path)."""
    if name == "heldout":
        from .prompts import MONITOR_PROMPTS, heldout_prompts

        return f"held-out prompts {MONITOR_PROMPTS + 1}-{len(heldout_prompts())}", heldout_prompts()[MONITOR_PROMPTS:]

    path = str(suite_path(name))
    return path, read_prompts(path)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prompts", default=str(ASSETS / "heldout_prompts.jsonl"))
    p.add_argument(
        "--suites",
        default="",
        help="comma list: public sets (gsm8k, humaneval, mtbench, math500), "
        "project suites or heldout; overrides --prompts",
    )
    p.add_argument("--limit", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=RunSpec.max_new_tokens)
    p.add_argument("--alpha", type=float, default=RunSpec.alpha)
    p.add_argument("--d-max", type=int, default=RunSpec.d_max)
    p.add_argument("--drafter", default=None, help="drafter folder (default: assets/drafter)")
    p.add_argument("--out", default="runs/eval")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    from ..experiments.provenance import shown_path
    from ..models.registry import DRAFTER_ENV, drafter_dir, load_pair

    if args.drafter:
        os.environ[DRAFTER_ENV] = args.drafter

    pair = load_pair()
    suites = (
        {name: suite_prompts(name) for name in args.suites.split(",")}
        if args.suites
        else {"": (args.prompts, read_prompts(args.prompts))}
    )
    suites = {name: (path, prompts[: args.limit or None]) for name, (path, prompts) in suites.items()}
    longest = max((len(pair.encode_prompt(p)) for _, prompts in suites.values() for p in prompts), default=0)
    checked = RunSpec(alpha=args.alpha, d_max=args.d_max, max_new_tokens=args.max_new_tokens).checked(
        pair.n, pair.max_context, longest
    )
    for note in checked.note_list:  # out of range: clamped, as everywhere, and said
        print(f"evaluate: corrected {note}", file=sys.stderr)
    args.alpha, args.d_max, args.max_new_tokens = checked.spec.alpha, checked.spec.d_max, checked.spec.max_new_tokens
    drafter = shown_path(drafter_dir())
    root = Path(args.out)
    summaries, results = {}, []
    for name, (path, prompts) in suites.items():
        out = root / name if name else root
        out.mkdir(parents=True, exist_ok=True)

        def write(result, done, out=out, name=name):  # after every prompt: a stopped run keeps its numbers
            summary = summarize_eval(result, args.alpha, args.d_max)
            summary.update(
                prompts=done,
                max_new_tokens=args.max_new_tokens,
                source=path,
                drafter=drafter,
            )
            atomic_write_text(out / "eval.json", json.dumps(summary, indent=1))
            atomic_write_text(out / "eval.md", to_markdown(summary, done, args.max_new_tokens, name or "held-out"))
            summaries[name] = summary

        results.append(run_modes(pair, prompts, args.max_new_tokens, args.alpha, args.d_max, on_prompt=write))
    if args.suites:
        pooled = summarize_eval(
            {
                "records": {k: [r for res in results for r in res["records"][k]] for k in results[0]["records"]},
                "profile": results[0]["profile"],
                "n": results[0]["n"],
            },
            args.alpha,
            args.d_max,
        )
        pooled["prompts"] = sum(s["prompts"] for s in summaries.values())
        head = (
            f"# Drafter evaluation: {args.limit or 'all'} prompts per suite, greedy, {args.max_new_tokens} new "
            f"tokens, drafter {drafter}, {args.threads} thread(s)\n\n"
            "a_k = P(draft k accepted | submitted) from static d = d_max rounds; speedups are measured wall "
            "clock over AR decoded beside each mode on every prompt.\n\n"
        )
        atomic_write_text(root / "README.md", head + suite_table(summaries, pooled))


if __name__ == "__main__":
    main()
