"""Benchmark runner behind `python -m libraspec bench` (its JSON output is a contract: tests/test_bench.py).

Every prompt is decoded in every requested mode (AR, static length d, LibraSpec, G4,
FailFast, oracle) on one model pair, interleaved prompt by prompt so that load on the
machine falls on all modes alike. Symbols follow the LibraSpec paper: n drafts per
drafting step, d the speculative length, d_max its cap, alpha the trade-off of
Algorithm 1, tau = accepted drafts + 1 tokens committed per round, d* the oracle length.

Speedups (docs/ARCHITECTURE.md, "What is timed") are totals over prompts: AR seconds per token divided by
the mode's seconds per token, AR measured in the same run on the same prompts; the
modeled speedup uses the latency profile. Each mode keeps its per-prompt totals beside
AR's and 95% bootstrap intervals of both speedups over prompts (stats.py). `mad_vs_oracle`
is mean |d - d*| over a mode's own rounds, d* from the untimed oracle annotation
(DecodeConfig.annotate_oracle); `regime` holds the d* histogram, the MAD of trivial
schedules on the same rounds and how often Algorithm 1 extends, rolls back, drafts further or meets d_max.
The config carries the run's provenance (provenance.py).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import sys
from dataclasses import dataclass, field
from typing import Sequence

import pandas as pd
import torch

from ..cost import LatencyProfile
from ..drafters import DRAFTERS
from ..engine import DecodeConfig, SpeculativeDecoder
from ..files import atomic_write_text
from ..modes import AR, BASELINE, MODES, ORACLE, PAPER, POLICY_MODES, TREE_MODES
from ..paths import read_prompts
from ..profiling import machine_description, profile_check, profile_reaching
from ..records import (
    RoundRecord,
    committed_text,
    frame_to_records,
    read_trace,
    records_to_frame,
    summarize,
    write_parquet,
)
from ..spec import NAMES, RunSpec, as_number
from .driver import AUTO, Job, alpha_policy, check_alpha, decode_grid, parse_alphas
from .provenance import cpu_clock, load_average, provenance, versions
from .stats import LEVEL, RESAMPLES, SEED, per_prompt, regime_stats, speedup_interval

DEFAULT_MODES = (AR, BASELINE, PAPER, ORACLE)
ANNOTATED_MODES = POLICY_MODES + TREE_MODES  # modes whose rounds can carry the hindsight d*
# bench labels besides the modes' own names: a mode run with its paper's settings (`Mode.published`)
PUBLISHED = {m.published_label: m.name for m in MODES.values() if m.published}


def label_title(label: str) -> str:
    """How tables name a bench label: the mode's label (`modes.MODES`), or a paper setting's."""
    if label in PUBLISHED:
        return f"{MODES[PUBLISHED[label]].label} (paper)"
    return MODES[label].label if label in MODES else label


def static_grid(n: int, d_max: int) -> tuple[int, ...]:
    """The static lengths a fair comparison decodes: 1..n, 2n and d_max (the best static is chosen from them)."""
    return tuple(sorted(set(range(1, n + 1)) | {2 * n, d_max}))


def parse_modes(text: str | Sequence[str]) -> tuple[str, ...]:
    modes = tuple(m.strip() for m in (text.split(",") if isinstance(text, str) else text) if m.strip())
    unknown = [m for m in modes if m not in MODES]
    if not modes or unknown:
        raise ValueError(f"unknown or missing modes {unknown or modes}; choose from {', '.join(MODES)}")
    if len(set(modes)) != len(modes):
        raise ValueError(f"modes listed twice: {', '.join(modes)}")
    return modes


def parse_lengths(text: str | Sequence[int] | None, what: str = "static lengths") -> tuple[int, ...] | None:
    """ "4,8,15" -> (4, 8, 15): distinct integers (static lengths, node budgets; their range is
    `RunSpec.checked`'s to clamp, in `BenchSpec.checked`, where a static length 0 means n, as
    everywhere); None stays None."""
    if text is None:
        return None
    items = text.split(",") if isinstance(text, str) else list(text)
    try:
        lengths = tuple(int(str(x).strip()) for x in items if str(x).strip())
    except ValueError:
        raise ValueError(f"{what} must be integers, got {text!r}") from None
    if not lengths or len(set(lengths)) != len(lengths):
        raise ValueError(f"{what} must be distinct integers, got {text!r}")
    return lengths


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def parse_annotate(text: str) -> tuple[str, ...]:
    """`--annotate static,libraspec` -> ("static", "libraspec"); "none" -> ()."""
    return () if text.strip() == "none" else tuple(m.strip() for m in text.split(",") if m.strip())


@dataclass(frozen=True)
class BenchSpec:
    """What one benchmark run decodes; the CLI flags of `bench`."""

    modes: tuple[str, ...] = DEFAULT_MODES
    max_new_tokens: int = RunSpec.max_new_tokens
    temperature: float = RunSpec.temperature  # 0 = greedy
    seed: int = RunSpec.seed  # prompt i is decoded with seed + i in every mode
    alpha: float | str = RunSpec.alpha  # "auto": alpha = T / (tau c) online (autoalpha.py)
    d_max: int = RunSpec.d_max  # also the oracle's look-ahead
    libraspec_start: int | None = None  # LibraSpec's first d (the paper's Fast-dLLM runs: 10); None: n
    static_lengths: tuple[int, ...] | None = None  # None: d = n, DFlash's static length
    annotate: bool | tuple[str, ...] = True  # oracle annotation (for mad_vs_oracle): all policy modes,
    # none, or the policy modes named (the annotation's look-ahead costs a long verification a round)
    drafter: str | None = None  # a name in drafters.DRAFTERS; None: the pair's default
    published: bool = False  # also each mode with its paper's settings (`Mode.published`): label MODE-paper
    node_budgets: tuple[int, ...] = (RunSpec.node_budget,)  # tree modes' node budgets; several: labels MODE-bB
    tree_depth: int | None = None  # ddtree's depth; None = n

    def __post_init__(self):
        object.__setattr__(self, "modes", parse_modes(self.modes))
        object.__setattr__(self, "alpha", parse_alphas((self.alpha,))[0])
        for mode in self.modes:
            check_alpha(mode, self.alpha)  # alpha "auto" for a mode with no LibraSpec inside: refused at once
        object.__setattr__(self, "static_lengths", parse_lengths(self.static_lengths))
        if self.drafter is not None and self.drafter not in DRAFTERS:
            raise ValueError(f"unknown drafter {self.drafter!r}; choose one of {', '.join(DRAFTERS)}")
        object.__setattr__(self, "node_budgets", parse_lengths(self.node_budgets, "node budgets"))
        if not isinstance(self.annotate, bool):
            object.__setattr__(self, "annotate", tuple(self.annotate))
            unknown = set(self.annotate) - set(ANNOTATED_MODES)
            if unknown:
                raise ValueError(
                    f"only policy and tree modes can be annotated ({', '.join(ANNOTATED_MODES)}), "
                    f"got {', '.join(sorted(unknown))}"
                )
        for name in ("temperature", "max_new_tokens", "seed", "d_max"):  # not numbers: refused, naming the field
            as_number(getattr(self, name), NAMES[name], field=name)

    def checked(self, n: int, context: int | None = None, prompt_tokens: int = 0) -> tuple["BenchSpec", list[str]]:
        """This spec with every knob clamped by `RunSpec.checked` (the one clamp) for a drafter with
        n drafts per step, the target's context window and the longest prompt, and a note per change."""
        numbers: dict = dict(d_max=self.d_max, max_new_tokens=self.max_new_tokens, temperature=self.temperature)
        numbers["seed"] = self.seed
        if self.alpha != AUTO:
            numbers["alpha"] = self.alpha
        if self.libraspec_start is not None:
            numbers["libraspec_start"] = self.libraspec_start
        checked = RunSpec(**numbers).checked(n, context, prompt_tokens)
        fixed, lengths = checked.spec, []
        changes = {name: getattr(fixed, name) for name in numbers}
        for name, values in (("static_length", self.static_lengths), ("node_budget", self.node_budgets)):
            out = []
            for value in values or ():
                one = RunSpec(d_max=fixed.d_max, **{name: value}).checked(n, context)
                out.append(getattr(one.spec, name))
                lengths += [one.notes[name]] if name in one.notes else []
            changes[name + "s"] = tuple(dict.fromkeys(out)) if values else values
        if self.tree_depth is not None:
            depth = RunSpec(tree_depth=self.tree_depth).checked(n, context)
            changes["tree_depth"], lengths = depth.spec.tree_depth, lengths + depth.note_list
        return dataclasses.replace(self, **changes), checked.note_list + lengths

    def lengths(self, n: int) -> tuple[int, ...]:
        return self.static_lengths or (n,)

    def longest(self, n: int) -> int:
        """The longest d any label may verify, or the most tree nodes (the latency profile must reach it)."""
        paper = tuple(dict(MODES[m].published).get("d_max", 0) for m in self.modes) if self.published else ()
        trees = self.node_budgets + ((self.tree_depth or n),) if any(m in TREE_MODES for m in self.modes) else ()
        return max((self.d_max,) + self.lengths(n) + paper + trees)

    def annotated(self) -> tuple[str, ...]:
        """Policy and tree modes whose rounds get the oracle annotation."""
        if isinstance(self.annotate, bool):
            return tuple(m for m in self.modes if m in ANNOTATED_MODES) if self.annotate else ()
        return tuple(m for m in self.modes if m in self.annotate)

    def labels(self, n: int) -> list[tuple[str, str, int | None]]:
        """(label, mode, static length or node budget) per run of a prompt; several static lengths
        give labels static-L, several node budgets MODE-bB, a mode with its paper's settings
        (`published`, `Mode.published`) the label MODE-paper (failfast-paper)."""
        out = []
        for mode in self.modes:
            if mode == BASELINE and len(self.lengths(n)) > 1:
                out += [(f"{mode}-{L}", mode, L) for L in self.lengths(n)]
            elif mode in TREE_MODES:
                several = len(self.node_budgets) > 1
                out += [(f"{mode}-b{B}" if several else mode, mode, B) for B in self.node_budgets]
            else:
                out.append((mode, mode, self.lengths(n)[0] if mode == BASELINE else None))
            if self.published and MODES[mode].published:
                out.append((MODES[mode].published_label, mode, None))
        return out


@dataclass
class BenchResult:
    """`summary` is the OUT.json document; `records[label][i]` the rounds of prompt i."""

    summary: dict
    records: dict[str, list[list[RoundRecord]]] = field(default_factory=dict)

    def frame(self) -> pd.DataFrame:
        """Every round of every run, with `label` and `prompt_index` columns."""
        parts = []
        for label, runs in self.records.items():
            for index, rounds in enumerate(runs):
                part = records_to_frame(rounds)
                part.insert(0, "prompt_index", index)
                part.insert(0, "label", label)
                parts.append(part)
        return pd.concat(parts, ignore_index=True)


def bench_profile(pair, spec: BenchSpec) -> LatencyProfile:
    """The cached latency profile, measured far enough for d_max and every static length, and
    measured again when its AR step is not what the machine takes now (`cached_profile`'s check)."""
    return profile_reaching(pair, spec.longest(pair.n), check=True)


def mode_summary(
    runs: Sequence[Sequence[RoundRecord]],
    ar_runs: Sequence[Sequence[RoundRecord]] | None,
    profile: LatencyProfile,
    strata: Sequence | None = None,
) -> dict:
    """The per-mode entry of OUT.json, from totals over prompts (records.summarize); `ar_runs`
    are AR's runs of the same prompts in the same order (the intervals pair them by prompt);
    `strata` labels each run's suite when runs of several suites are pooled (stratified intervals)."""
    records = [r for run in runs for r in run]
    ar = [r for run in ar_runs for r in run] if ar_runs else None
    s = summarize(records, ar)
    modeled = s.speedup_modeled
    if modeled is None and s.modeled_seconds > 0:  # no AR run: AR's modeled cost is the profile's
        modeled = profile.ar_token_time() * s.tokens / s.modeled_seconds
    rows = per_prompt(runs, ar_runs)
    policy_s = sum(r.policy_s for r in records)
    kind = MODES[s.mode].kind
    return {
        "mode": s.mode,
        "tokens": s.tokens,
        "rounds": s.rounds,
        "prompts": len(runs),
        "tau": s.tau,
        "wall_s": s.seconds,
        "modeled_s": s.modeled_seconds,
        "tokens_per_s": s.tokens / s.seconds if s.seconds > 0 else None,
        "speedup_measured": s.speedup_measured,
        "speedup_modeled": modeled,
        "speedup_measured_ci": speedup_interval(rows, "wall_s", strata=strata),
        "speedup_modeled_ci": speedup_interval(
            rows, "modeled_s", None if ar_runs else profile.ar_token_time(), strata=strata
        ),
        "mad_vs_oracle": s.mad_vs_oracle if kind in ("policy", "tree") else None,
        "mean_length": sum(r.chosen_length for r in records) / len(records) if kind != "ar" else None,
        "mean_tree_size": sum(r.tree_size for r in records) / len(records) if kind == "tree" else None,
        "mean_oracle_tree_size": _mean([r.oracle_tree_size for r in records]) if kind == "tree" else None,
        "policy_s": policy_s,
        "policy_share": policy_s / s.seconds if s.seconds > 0 else None,
        "regime": regime_stats(records_to_frame(records), profile.n) if kind in ("policy", "tree") else None,
        "per_prompt": rows,
    }


def run_bench(
    pair,
    prompts: Sequence[str],
    spec: BenchSpec,
    *,
    profile: LatencyProfile | None = None,
    progress: bool = False,
    source: str = "",
) -> BenchResult:
    """Decode every prompt in every mode of `spec`; returns the summary and every round."""
    if not prompts:
        raise ValueError("no prompts to benchmark")
    n = pair.n
    longest = max(len(pair.encode_prompt(p)) for p in prompts)
    spec, clamped = spec.checked(n, pair.target.max_positions, longest)  # out of range: clamped, and said
    for note in clamped:
        print(f"bench: corrected {note}", file=sys.stderr)
    profile = profile or bench_profile(pair, spec)
    decoder = SpeculativeDecoder(pair, profile, drafter=spec.drafter)
    labels = spec.labels(n)
    jobs = [
        Job(
            label,
            mode,
            functools.partial(alpha_policy, mode, _settings(spec, n, label, mode, value), spec.alpha, profile),
            functools.partial(_config, spec, mode),
        )
        for label, mode, value in labels
    ]
    records = {label: [] for label, _, _ in labels}
    load_before, clock_before = load_average(), cpu_clock()
    bar = _progress(len(prompts) * len(labels), progress)
    for event in decode_grid(decoder, [pair.encode_prompt(p) for p in prompts], jobs):
        records[event.label].append(event.records)
        bar.set_postfix_str(f"prompt {event.index}, {event.label}", refresh=False)
        bar.update(1)
    bar.close()
    summary = _summary(pair, prompts, spec, profile, records, labels, source)
    summary["config"]["clamped"] = clamped
    summary["config"]["provenance"] = provenance(pair, spec.drafter or pair.default_drafter, load_before, clock_before)
    return BenchResult(summary, records)


def _settings(spec: BenchSpec, n: int, label: str, mode: str, value: int | None) -> RunSpec:
    """The policy knobs of one label but alpha (`driver.alpha_policy` sets the bench's): LibraSpec's
    start and the static length (n when unset), a MODE-paper label's published settings (`Mode.published`),
    ddtree's depth (n when unset) and a tree mode's node budget (`value`)."""
    if label in PUBLISHED:
        return RunSpec(**dict(MODES[mode].published)).checked(n).spec
    tree = MODES[mode].kind == "tree"
    settings = RunSpec(
        d_max=spec.d_max,
        libraspec_start=spec.libraspec_start,
        static_length=n if tree else value or n,
        tree_depth=spec.tree_depth or n,
        node_budget=value if tree else spec.node_budgets[0],
    )
    return settings.checked(n).spec


def _config(spec: BenchSpec, mode: str, index: int) -> DecodeConfig:
    """Prompt `index`'s config: seed + index in every mode, the oracle annotation where asked."""
    return DecodeConfig.of(spec, seed=spec.seed + index, annotate_oracle=mode in spec.annotated())


def _progress(total: int, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc="bench", unit="run", file=sys.stderr, disable=not enabled)


def _summary(pair, prompts, spec: BenchSpec, profile, records, labels, source) -> dict:
    ar_runs = records.get(AR)
    modes = {label: mode_summary(records[label], ar_runs, profile) for label, _, _ in labels}
    statics = [(label, L) for label, mode, L in labels if mode == BASELINE]
    best = None
    for label, length in statics:
        modes[label]["length"] = length
    if statics:
        best = max(statics, key=lambda item: modes[item[0]]["tokens_per_s"] or 0.0)
        for label, _ in statics:
            modes[label]["best"] = label == best[0]
    n = pair.n
    runs = [
        {
            "prompt_index": i,
            "mode": label,
            "output_ids": committed_text(rounds),
            "text": pair.decode(committed_text(rounds)),
            "tokens": sum(r.tau for r in rounds),
            "rounds": len(rounds),
            "wall_s": sum(r.measured_s for r in rounds),
        }
        for label, _, _ in labels
        for i, rounds in enumerate(records[label])
    ]
    runs.sort(key=lambda run: run["prompt_index"])
    target_name = getattr(pair.target.config, "name_or_path", "") or type(pair.target.model).__name__
    config = {
        "models": {
            "pair": pair.name,
            "description": pair.description,
            "target": target_name,
            "drafter_id": pair.drafter_id,
            "drafter": spec.drafter or pair.default_drafter,
        },
        "alpha": spec.alpha,
        "d_max": spec.d_max,
        "n": n,
        "static_length": best[1] if best else spec.lengths(n)[0],
        "static_lengths": list(spec.lengths(n)),
        "best_static": best[0] if best else None,
        # each label's policy knobs but alpha (above), as its policy was built (`_settings`)
        "settings": {
            label: {
                knob: getattr(_settings(spec, n, label, mode, value), knob)
                for knob in MODES[mode].knobs
                if knob != "alpha"
            }
            for label, mode, value in labels
        },
        "node_budgets": list(spec.node_budgets),
        "tree_depth": spec.tree_depth or n,
        "modes": list(spec.modes),
        "max_new_tokens": spec.max_new_tokens,
        "temperature": spec.temperature,
        "seed": spec.seed,
        "prompts": source,
        "num_prompts": len(prompts),
        "oracle_annotation": list(spec.annotated()),
        "profile": profile.to_dict(),
        "machine": machine_description(),
        "threads": torch.get_num_threads(),
        "profile_check": profile_check(profile, [r for run in ar_runs for r in run]) if ar_runs else None,
        "versions": versions(),
        "bootstrap": {"resamples": RESAMPLES, "level": LEVEL, "seed": SEED},
    }
    return {"config": config, "modes": modes, "runs": runs}


def write_json(data: dict, path: str | os.PathLike) -> str:
    """OUT.json, atomically; NaN or infinity is refused (JSON has neither)."""
    return atomic_write_text(path, json.dumps(data, indent=1, allow_nan=False))


def records_path(out: str | os.PathLike) -> str:
    """OUT.json -> OUT.records.parquet, the per-round records of every run."""
    return os.path.splitext(os.fspath(out))[0] + ".records.parquet"


def write_result(result: BenchResult, out: str | os.PathLike) -> tuple[str, str]:
    """OUT.records.parquet, then OUT.json (each atomically): a JSON file marks a complete result,
    so a run stopped between the two never leaves a new summary beside old records."""
    records = write_parquet(result.frame(), records_path(out))
    return write_json(result.summary, out), records


def read_result(out: str | os.PathLike) -> BenchResult:
    """Inverse of `write_result`: the summary and, per label, the rounds of each prompt in order."""
    with open(out, encoding="utf-8") as handle:
        summary = json.load(handle)
    frame = read_trace(records_path(out))
    records = {}
    for label in summary["modes"]:
        mine = frame[frame["label"] == label]
        records[label] = [
            frame_to_records(mine[mine["prompt_index"] == i].drop(columns=["label", "prompt_index"]))
            for i in range(summary["config"]["num_prompts"])
        ]
    return BenchResult(summary, records)


# -- CLI ---------------------------------------------------------------------------------------

HELP = "decode a prompt file in several modes and write speedups, tau and outputs as JSON"


def add_arguments(parser) -> None:
    parser.add_argument("--prompts", required=True, help="JSONL file; lines carry prompt, question or turns")
    parser.add_argument("--modes", default=",".join(DEFAULT_MODES), help=f"comma list of {', '.join(MODES)}")
    parser.add_argument("--max-new-tokens", type=int, default=RunSpec.max_new_tokens)
    parser.add_argument("--temperature", type=float, default=RunSpec.temperature, help="0 = greedy")
    parser.add_argument("--seed", type=int, default=RunSpec.seed, help="prompt i uses seed + i")
    parser.add_argument("--out", required=True, help="OUT.json; rounds go to OUT.records.parquet")
    parser.add_argument("--static-lengths", default=None, help="comma list, e.g. 4,8,15; 0 means n (default: n)")
    parser.add_argument(
        "--alpha", default=f"{RunSpec.alpha:g}", help="LibraSpec's alpha: a number, or auto (T / (tau c) online)"
    )
    parser.add_argument("--d-max", type=int, default=RunSpec.d_max)
    parser.add_argument(
        "--libraspec-start",
        type=int,
        default=None,
        help="LibraSpec's first d (the paper's Fast-dLLM runs: 10; default: n)",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: unchanged)")
    parser.add_argument("--model", default=None, help="model pair (default: the registry default)")
    parser.add_argument("--limit", type=int, default=None, help="use the first K prompts only")
    parser.add_argument(
        "--published",
        "--failfast-paper",
        dest="published",
        action="store_true",
        help="also every mode with its own paper's settings, labelled MODE-paper (failfast-paper: "
        "threshold 0.45, start and step 10, at most 60)",
    )
    parser.add_argument(
        "--node-budget",
        default=str(RunSpec.node_budget),
        help="tree modes' node budget, or a comma list (labels MODE-bB), e.g. 16,32,64",
    )
    parser.add_argument("--tree-depth", type=int, default=None, help="ddtree's depth (default: n)")
    parser.add_argument(
        "--annotate",
        default=",".join(ANNOTATED_MODES),
        help="policy and tree modes to annotate with the oracle d* (for MAD); 'none' for none",
    )
    add_drafter_argument(parser)
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def add_drafter_argument(parser) -> None:
    parser.add_argument("--drafter", choices=DRAFTERS, default=None, help="drafter (default: the model pair's default)")


def set_threads(threads: int | None) -> None:
    if threads is not None:
        if threads < 1:
            raise ValueError(f"--threads must be >= 1, got {threads}")
        torch.set_num_threads(threads)


def read_limited(path, limit: int | None) -> list[str]:
    """The prompts of `path` (`paths.read_prompts`), the first `limit` of them when given (--limit)."""
    prompts = read_prompts(path)
    if limit is not None and limit < 1:
        raise ValueError(f"--limit must be >= 1, got {limit}")
    return prompts if limit is None else prompts[:limit]


def run(args) -> int:
    from ..models.registry import load_pair

    set_threads(args.threads)
    prompts = read_limited(args.prompts, args.limit)
    spec = BenchSpec(
        modes=parse_modes(args.modes),
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        seed=args.seed,
        alpha=args.alpha,
        d_max=args.d_max,
        libraspec_start=args.libraspec_start,
        static_lengths=parse_lengths(args.static_lengths),
        annotate=parse_annotate(args.annotate),
        drafter=args.drafter,
        published=args.published,
        node_budgets=parse_lengths(args.node_budget, "node budgets"),
        tree_depth=args.tree_depth,
    )
    pair = load_pair(args.model)
    result = run_bench(pair, prompts, spec, progress=not args.quiet, source=str(args.prompts))
    write_result(result, args.out)
    return 0
