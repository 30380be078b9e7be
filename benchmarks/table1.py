"""The paper's Table 1 rows on the embedded pair, modeled by replay: `python benchmarks/table1.py`.

For the single-pass block drafter (dflash), the iterative one (fastdllm, Fast-dLLM-style; the
paper's Table 1 drafter is Fast-dLLM v2) and the autoregressive head (eagle, EAGLE-3-style, the
paper's autoregressive baseline): AR, every static length 3..20 (the best one chosen in
hindsight on these prompts, as the paper sweeps it), FailFast with this project's and the FailFast
paper's settings, G4-style, LibraSpec at the paper's alpha 2.0 and d_max 60, the per-round oracle
and the best schedule in hindsight. The first --limit prompts of GSM8K, HumanEval, MATH-500 and
MT-Bench (../shared/data, read at run time), --max-new-tokens tokens of greedy text. Every figure is
**modeled by replay** under this machine's measured latency profile at batch 1 (greedy rounds are
exact; their seconds come from the profile, which prices every iterative pass as a pass): the
speedup over AR pooled over all prompts (ratio of sums) with its 95% bootstrap interval over
prompts, stratified by suite; a_1 and the ECE of q over every position's first draft and the
drafts a greedy round of the whole chain judges. Traces are cached per prompt and drafter (a rerun
resumes); set LIBRASPEC_DRAFTER or LIBRASPEC_EAGLE to replay other weights (the cache is keyed by
their hashes).

With --measured K (and --sampled 1, the default) the first K prompts of each suite are also decoded by
the engine and timed: greedy (AR, each drafter's best static length and LibraSpec, every text checked
equal to AR's) and at temperature 1, which no replay models (AR and every policy row but the oracle,
static lengths SAMPLED_STATIC only; seed = the prompt's index). Run it idle.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from libraspec.analysis.calibration import expected_calibration_error  # noqa: E402
from libraspec.analysis.replay import rounds_reproduced  # noqa: E402
from libraspec.analysis.trace import DraftTrace, record_trace  # noqa: E402
from libraspec.cost import LatencyProfile  # noqa: E402
from libraspec.engine import DecodeConfig, SpeculativeDecoder  # noqa: E402
from libraspec.experiments import grids  # noqa: E402
from libraspec.experiments.bench import PUBLISHED, label_title  # noqa: E402
from libraspec.experiments.provenance import cpu_clock, others_share  # noqa: E402
from libraspec.experiments.stats import pooled_speedup, speedup_interval  # noqa: E402
from libraspec.files import atomic_write_text  # noqa: E402
from libraspec.models.registry import load_pair  # noqa: E402
from libraspec.modes import AR, BASELINE, MODES, ORACLE, PAPER  # noqa: E402
from libraspec.paths import PUBLIC_DATA, cache_root, read_prompts  # noqa: E402
from libraspec.records import committed_text  # noqa: E402
from libraspec.spec import RunSpec  # noqa: E402

SUITES = {
    "gsm8k": "gsm8k_test.jsonl",
    "humaneval": "humaneval.jsonl",
    "math500": "math500.jsonl",
    "mtbench": "mt_bench_questions.jsonl",
}
STATIC = range(3, 21)  # the paper's sweep of static lengths
PAPER_ALPHA, PAPER_D_MAX, PAPER_START = 2.0, 60, 10  # Table 1's LibraSpec settings (start: its first d)
OUT = ROOT / "benchmarks" / "results" / "table1"


def configs() -> list[grids.Config]:
    base = RunSpec(d_max=PAPER_D_MAX)
    rows = [grids.Config("AR", AR)]
    rows += [grids.Config(f"static d={d}", BASELINE, dataclasses.replace(base, static_length=d)) for d in STATIC]
    rows.append(grids.Config("FailFast", "failfast", base))
    rows += [
        grids.Config(label_title(label), mode, dataclasses.replace(base, **dict(MODES[mode].published)))
        for label, mode in PUBLISHED.items()
    ]
    rows.append(grids.Config(MODES["g4"].label, "g4", base))
    libraspec = RunSpec(PAPER_ALPHA, PAPER_D_MAX)
    rows.append(grids.Config(f"LibraSpec alpha={PAPER_ALPHA:g} d_max={PAPER_D_MAX}", PAPER, libraspec))
    rows.append(  # as the paper runs it on Fast-dLLM: line 4 starts at 10 drafts, not the drafter's n
        grids.Config(
            f"LibraSpec alpha={PAPER_ALPHA:g} d_max={PAPER_D_MAX} start={PAPER_START}",
            PAPER,
            dataclasses.replace(libraspec, libraspec_start=PAPER_START),
        )
    )
    rows.append(grids.Config("oracle d* per round", ORACLE, base))
    rows.append(grids.Config(grids.BEST, grids.BEST, base))
    return rows


def traces(pair, args) -> dict[str, list[tuple[str, DraftTrace]]]:
    """drafter -> [(suite, trace)]: AR's greedy text once per prompt, then each drafter's trace."""
    key = f"{pair.drafter_id}-{args.max_new_tokens}-{args.lookahead}".replace(":", "")
    cache = Path(cache_root()) / "table1" / key
    cache.mkdir(parents=True, exist_ok=True)
    out: dict[str, list] = {d: [] for d in args.drafters}
    decoder = SpeculativeDecoder(pair, drafter="dflash")
    for suite, file in SUITES.items():
        for i, text in enumerate(read_prompts(Path(args.data) / file)[: args.limit]):
            prompt = pair.encode_prompt(text)
            text_file = cache / f"{suite}-{i}.json"
            if not text_file.exists():
                config = DecodeConfig.of(RunSpec(max_new_tokens=args.max_new_tokens))
                atomic_write_text(str(text_file), json.dumps(committed_text(decoder.run(prompt, "ar", None, config))))
            output = json.loads(text_file.read_text())
            for drafter in args.drafters:
                weights = f"-{pair.eagle_id[7:19]}" if drafter == "eagle" else ""  # the head's own hash
                path = cache / f"{suite}-{i}-{drafter}{weights}.npz"
                if not path.exists():
                    record_trace(pair, drafter, prompt, output, args.max_new_tokens, args.lookahead).save(path)
                    print(suite, i, drafter, flush=True)
                out[drafter].append((suite, DraftTrace.load(path)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--lookahead", type=int, default=PAPER_D_MAX)
    parser.add_argument("--drafters", default="dflash,fastdllm,eagle")
    parser.add_argument("--data", default=str(PUBLIC_DATA))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=str(OUT))
    parser.add_argument(
        "--profile", default="", help="a latency profile JSON to price with (default: this pair's cached one)"
    )
    parser.add_argument(
        "--measured",
        type=int,
        default=0,
        help="also decode the first K prompts of each suite with the engine and time them (run it idle)",
    )
    parser.add_argument(
        "--sampled",
        type=int,
        default=1,
        help="with --measured: also decode those prompts at temperature 1 (1, the default) or not (0)",
    )
    parser.add_argument(
        "--benchmarks",
        default=str(ROOT / "BENCHMARKS.md"),
        help="the file whose Table 1 section this run rewrites ('' for none)",
    )
    args = parser.parse_args()
    args.drafters = args.drafters.split(",")
    torch.set_num_threads(args.threads)
    start = cpu_clock()
    pair = load_pair()
    profile = (
        LatencyProfile.from_json(args.profile) if args.profile else SpeculativeDecoder(pair, drafter="dflash").profile
    )
    by_drafter = traces(pair, args)
    result = {"drafters": {}}
    for drafter, pairs in by_drafter.items():
        strata = [suite for suite, _ in pairs]
        rows = {}
        for config in configs():
            rows[config.label] = grids.summarize(grids.replay_rows([t for _, t in pairs], config, profile), strata)
        statics = {label: row for label, row in rows.items() if label.startswith("static d=")}
        best = max(statics, key=lambda label: statics[label]["speedup"])
        steps = sum(int(t.steps[g]) for _, t in pairs for g in range(len(t)))
        passes = steps + sum(len(t.discarded[g]) for _, t in pairs for g in range(len(t)))
        first = [int(t.tokens[g, 0] == t.output[g]) for _, t in pairs for g in range(len(t)) if not t.empty[g]]
        q, right = judged(t for _, t in pairs)
        result["drafters"][drafter] = {
            "rows": rows,
            "best_static": best,
            "passes_per_block": passes / steps,
            "a_1": sum(first) / len(first),  # the first draft equals the text, over every position
            "ece": expected_calibration_error(q, right),
            "mean_q1": float(sum(float(t.q[g, 0]) for _, t in pairs for g in range(len(t)) if not t.empty[g]))
            / len(first),
        }
    if args.measured:
        result["measured"] = measured_check(pair, profile, args, measured_labels(result, 0.0), 0.0, by_drafter)
    if args.measured and args.sampled:
        result["sampled"] = measured_check(pair, profile, args, measured_labels(result, 1.0), 1.0, by_drafter)
    result["meta"] = {
        "limit": args.limit,
        "measured_limit": args.measured,
        "sampled": bool(args.measured and args.sampled),
        "max_new_tokens": args.max_new_tokens,
        "lookahead": args.lookahead,
        "drafter_id": pair.drafter_id,
        "eagle_id": pair.eagle_id,
        "profile": args.profile or "this pair's cached profile",
        "profile_meta": {k: v for k, v in profile.meta.items() if not k.startswith("raw_")},
        "other_cpu": others_share(start, cpu_clock()) or 0.0,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(str(out / "summary.json"), json.dumps(result, indent=1))
    atomic_write_text(str(out / "README.md"), table(result))
    if args.benchmarks:
        splice(Path(args.benchmarks), section(result, out))
    print(table(result))


MARKERS = ("<!-- table1: written by benchmarks/table1.py -->", "<!-- /table1 -->")


def section(result: dict, out: Path) -> str:
    """BENCHMARKS.md's Table 1 section: this run's table under its own heading, between MARKERS (which
    benchmarks/replay_report.py keeps when it writes the rest of the file)."""
    where = out.relative_to(ROOT) if out.is_relative_to(ROOT) else out
    body = table(result).split("\n", 2)[2]  # the table without the README's title
    return "\n".join(
        [
            MARKERS[0],
            "## The paper's Table 1 on the embedded pair (modeled by replay; temperature 1 measured)",
            "",
            f"From one run of `benchmarks/table1.py` (`{where}/`); the paper's claims, point by point, "
            "are in `benchmarks/results/table1/CLAIMS.md`.",
            "",
            body.rstrip("\n"),
            MARKERS[1],
            "",
        ]
    )


def splice(path: Path, text: str) -> None:
    """Replace the section between MARKERS in `path`, or put it before "## Reproduce" (else at the end)."""
    old = path.read_text()
    if MARKERS[0] in old and MARKERS[1] in old:
        head, rest = old.split(MARKERS[0], 1)
        new = head + text.rstrip("\n") + rest.split(MARKERS[1], 1)[1]
    elif "\n## Reproduce" in old:
        head, rest = old.split("\n## Reproduce", 1)
        new = head + "\n" + text + "\n## Reproduce" + rest
    else:
        new = old.rstrip("\n") + "\n\n" + text
    atomic_write_text(str(path), new)


SAMPLED_STATIC = (3, 4)  # at temperature 1: the greedy sweep's best lengths on this pair (3 or 4), not swept


def measured_labels(result: dict, temperature: float) -> dict[str, list[str]]:
    """drafter -> the rows the measured check decodes. Greedy: its best static length (chosen by
    replay) and both LibraSpec rows. Temperature 1, which no replay models: every policy row of the
    table but the oracle's, with the static lengths SAMPLED_STATIC only (not swept 3..20)."""
    labels = [config.label for config in configs()]
    libraspec = [label for label in labels if label.startswith("LibraSpec")]
    if temperature == 0:
        return {drafter: [entry["best_static"], *libraspec] for drafter, entry in result["drafters"].items()}
    sampled = [f"static d={d}" for d in SAMPLED_STATIC]
    greedy_only = ("AR", "static d=", "oracle", grids.BEST)
    sampled += [label for label in labels if not label.startswith(greedy_only)]
    return {drafter: sampled for drafter in result["drafters"]}


def decode_row(decoder, prompt, row, temperature: float, seed: int, max_new_tokens: int):
    """One engine decode of a Table 1 row (`row`, a `configs()` entry, its knobs checked) at `temperature`
    and `seed`: its records and its wall clock in seconds."""
    settings = dataclasses.replace(row.settings, temperature=temperature, seed=seed)
    settings, _ = settings.checked(decoder.n, context=decoder.pair.target.max_positions)
    policy = MODES[row.mode].policy(settings, decoder.profile)
    start = time.perf_counter()
    records = list(decoder.run(prompt, row.mode, policy, DecodeConfig.of(settings, max_new_tokens=max_new_tokens)))
    return records, time.perf_counter() - start


def measured_check(
    pair, profile: LatencyProfile, args, labels: dict[str, list[str]], temperature: float, by_drafter: dict
) -> dict:
    """Wall clock on the first `args.measured` prompts of each suite at `temperature`: AR, then each
    drafter's `labels`, decoded by the engine (temperature 1: seed = the prompt's index in the run).
    Speedup = AR's seconds per token over the row's, pooled over prompts, with its 95% bootstrap
    interval, beside the modeled speedup of the same engine rounds and tau. Greedy rows' texts are
    checked against AR's and their rounds against the replay of the prompt's trace (`by_drafter`, as
    `traces` returns it): d, accepted and committed tokens, round by round. Sampled texts differ from
    AR's draw and no replay makes sampled rounds: the exact sampling cells test those."""
    by_label = {config.label: config for config in configs()}
    rows: dict[str, dict[str, list[dict]]] = {}
    strata, equal = [], {}
    warm = SpeculativeDecoder(pair, profile, drafter="dflash")
    first = DecodeConfig.of(RunSpec(max_new_tokens=8))
    list(warm.run(pair.encode_prompt("Hello."), "ar", None, first))  # first-call costs
    for suite, file in SUITES.items():
        for i, text in enumerate(read_prompts(Path(args.data) / file)[: args.measured]):
            prompt = pair.encode_prompt(text)
            spec = RunSpec(max_new_tokens=args.max_new_tokens, temperature=temperature, seed=len(strata))
            strata.append(suite)
            start = time.perf_counter()
            ar = list(warm.run(prompt, "ar", None, DecodeConfig.of(spec)))
            ar_s = time.perf_counter() - start
            ar_text = committed_text(ar)
            for drafter, mine in labels.items():
                decoder = SpeculativeDecoder(pair, profile, drafter=drafter)
                for label in mine:
                    config = by_label[label]
                    records, wall = decode_row(decoder, prompt, config, temperature, spec.seed, args.max_new_tokens)
                    key = f"{drafter} / {label}"
                    equal[key] = equal.get(key, True) and committed_text(records) == ar_text
                    same, replayed = 0, []
                    if temperature == 0:
                        trace = [t for s, t in by_drafter[drafter] if s == suite][i]
                        replayed = grids.replay_config(trace, config, profile)
                        same = rounds_reproduced(records, replayed)
                    rows.setdefault(drafter, {}).setdefault(label, []).append(
                        {
                            "tokens": len(committed_text(records)),
                            "rounds": len(records),
                            "equal_rounds": same,
                            "compared_rounds": max(len(records), len(replayed)) if replayed else 0,
                            "wall_s": wall,
                            "modeled_s": records[-1].cumulative_modeled_s,
                            "ar_tokens": len(ar_text),
                            "ar_wall_s": ar_s,
                            "ar_modeled_s": ar[-1].cumulative_modeled_s,
                        }
                    )
            print(f"measured T={temperature:g}", suite, len(strata), flush=True)
    out = {}
    for drafter, by_row in rows.items():
        for label, mine in by_row.items():
            summary = {}
            for seconds in ("wall_s", "modeled_s"):
                summary[seconds] = {
                    "speedup": pooled_speedup(mine, seconds),
                    "interval": speedup_interval(mine, seconds, strata=strata),
                }
            summary["tau"] = sum(r["tokens"] for r in mine) / sum(r["rounds"] for r in mine)
            summary["equals_ar"] = equal[f"{drafter} / {label}"] if temperature == 0 else None
            if temperature == 0:
                summary["replayed_rounds"] = [sum(r[k] for r in mine) for k in ("equal_rounds", "compared_rounds")]
            out.setdefault(drafter, {})[label] = summary
    return out


def judged(traces) -> tuple[list[float], list[int]]:
    """(q_i, accepted) of every draft a greedy round verifying an anchor's whole chain judges: drafts
    1 .. matches + 1 (the first wrong one included), as `libraspec.train.evaluate` counts them."""
    q, right = [], []
    for t in traces:
        for g in range(len(t)):
            if t.empty[g]:
                continue
            m, drafted = t.matches(g), min(int(t.steps[g]) * t.n, len(t.output) - g)
            for i in range(min(m + 1, drafted)):
                q.append(float(t.q[g, i]))
                right.append(int(i < m))
    return q, right


def table(result: dict) -> str:
    meta = result["meta"]
    lines = [
        "# The paper's Table 1 rows on the embedded pair (modeled by replay)",
        "",
        f"`python benchmarks/table1.py`: the first {meta['limit']} prompts of GSM8K, HumanEval, MATH-500 and "
        f"MT-Bench, {meta['max_new_tokens']} greedy tokens, drafter weights {meta['drafter_id']}. Speedup over AR "
        f"**modeled by replay** under this machine's batch-1 latency profile ({meta['profile']}), "
        "pooled over prompts, with its 95% "
        'bootstrap interval (prompts resampled within their suite). "best static" is the best of d = 3..20 '
        "chosen in hindsight on these same prompts; a_1 the share of positions whose first draft equals the "
        "text, q_1 its mean confidence, ECE the calibration error of q over the drafts a greedy round judges. "
        f"Other processes used {meta['other_cpu']:.0%} of the CPU (replay is modeled: load changes no "
        "figure).",
        "",
        "| drafter | a_1 | q_1 | ECE | passes per block | row | speedup (95% interval) | tau | mean d |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for drafter, entry in result["drafters"].items():
        rows = entry["rows"]
        shown = ["AR", entry["best_static"]] + [k for k in rows if k != "AR" and not k.startswith("static d=")]
        for label in shown:
            row = rows[label]
            low, high = row["interval"] or (float("nan"), float("nan"))
            name = f"best static ({label})" if label == entry["best_static"] else label
            tau = "" if row["tau"] is None else f"{row['tau']:.2f}"
            mean_d = "" if row["mean_d"] is None else f"{row['mean_d']:.1f}"
            lines.append(
                f"| {drafter} | {entry['a_1']:.3f} | {entry.get('mean_q1', float('nan')):.3f} "
                f"| {entry.get('ece', float('nan')):.3f} | {entry['passes_per_block']:.2f} | {name} "
                f"| {row['speedup']:.3f} "
                f"({low:.3f}-{high:.3f}) | {tau} | {mean_d} |"
            )
    if result.get("measured"):
        lines += [
            "",
            f"**Measured check** (wall clock, engine decoding, the first {meta['measured_limit']} prompts of each "
            f"suite, {meta['max_new_tokens']} greedy tokens; other processes used {meta['other_cpu']:.0%} of the CPU "
            "over the whole run): speedup over AR measured and, for the same engine rounds, modeled by the profile; "
            "each row's rounds compared with the replay of the prompt's trace (d, accepted and committed tokens).",
            "",
            *measured_rows(result["measured"], greedy=True),
        ]
    if result.get("sampled"):
        lines += [
            "",
            f"**Temperature 1, measured** (the same {meta['measured_limit']} prompts of each suite, "
            f"{meta['max_new_tokens']} tokens sampled at temperature 1 with seed = the prompt's index, one draw a "
            "prompt; AR sampled with the same seed): no replay models sampled rounds, so these rows are decoded and "
            "timed. Static lengths are d = "
            f"{', '.join(str(d) for d in SAMPLED_STATIC)} only (around the greedy sweep's best), not swept 3..20; "
            "the oracle (its d* comes from an untimed look-ahead verification) and the best schedule (a replay of "
            "greedy traces) are left out. tau is tokens committed per round; the modeled column prices the same "
            "rounds with the profile.",
            "",
            *measured_rows(result["sampled"], greedy=False),
        ]
    return "\n".join(lines) + "\n"


def measured_rows(measured: dict, greedy: bool) -> list[str]:
    """The measured check's table: a row per drafter and policy row."""
    lines = [
        "| drafter | row | measured speedup (95% interval) | modeled, same rounds (95% interval) | tau "
        + ("| equals AR | rounds the replay reproduced |" if greedy else "|"),
        "|---|---|---|---|---|" + ("---|---|" if greedy else ""),
    ]
    for drafter, by_row in measured.items():
        for label, row in by_row.items():
            cells = []
            for seconds in ("wall_s", "modeled_s"):
                low, high = row[seconds]["interval"] or (float("nan"), float("nan"))
                cells.append(f"{row[seconds]['speedup']:.3f} ({low:.3f}-{high:.3f})")
            end = ""
            if greedy:
                same, compared = row.get("replayed_rounds", (0, 0))
                end = f" {'yes' if row['equals_ar'] else 'NO'} | {same}/{compared} |"
            lines.append(f"| {drafter} | {label} | {cells[0]} | {cells[1]} | {row.get('tau', float('nan')):.2f} |{end}")
    return lines


if __name__ == "__main__":
    main()
