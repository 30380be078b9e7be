"""`python -m libraspec report`: runs the measured benchmark suite (every run decoded for real) and writes
its report (default benchmarks/results/measured/REPORT.md; BENCHMARKS.md comes from replay,
`benchmarks/replay_report.py`).

Per prompt suite (assets/prompts/{math,code,chat}.jsonl) and temperature (0 and 1) one
`bench` run covers AR, every static length d, LibraSpec (alpha, d_max), G4, FailFast and
the oracle, with oracle annotation for MAD. At temperature 0 LibraSpec alone is rerun for
the alpha sensitivity (paper Table 4) and the d_max sensitivity (paper Fig. 4); those runs
skip the annotation and decode AR again beside LibraSpec, prompt by prompt, so that their
measured speedups see the same load on the machine as their AR baseline.
One latency profile, measured up to the largest d_max, serves every run.

The markdown itself (tables, goals, the paper comparison) is `report_md.render`; this
module plans, runs, saves the per-run JSON / parquet files and the figures.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shlex
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable

import torch

from ..cost import DIFFUSION, LatencyProfile, tree_round_s
from ..files import atomic_write_text
from ..modes import AR, BASELINE, MODES, ORACLE, PAPER, POLICY_MODES, TREE_MODES
from ..paths import PROMPTS_DIR, PUBLIC_DATA, PUBLIC_SUITES, read_prompts, suite_path
from ..profiling import machine_description, profile_reaching
from ..spec import RunSpec
from .bench import (
    BenchSpec,
    add_drafter_argument,
    parse_annotate,
    read_result,
    records_path,
    run_bench,
    set_threads,
    static_grid,
    write_result,
)
from .driver import AUTO, alpha_label, parse_alphas
from .provenance import BUSY_LOAD, load_average, model_files, shown_path, source_digest, versions
from .report_md import render

SUITES = ("math", "code", "chat")  # the default: assets/prompts, written for this project
ALL_MODES = tuple(name for name, m in MODES.items() if m.kind != "tree")  # trees have their own runs (tree_spec)
TREE_RUN_MODES = (AR, BASELINE, PAPER) + tuple(name for name, m in MODES.items() if m.kind == "tree")


@dataclass(frozen=True)
class ReportPlan:
    """Everything `report` runs; `--quick` and the default differ in size (and the label "quick")."""

    prompts_per_suite: int = 16
    max_new_tokens: int = RunSpec.max_new_tokens
    suites: tuple[str, ...] = SUITES
    temperatures: tuple[float, ...] = (0.0, 1.0)
    alpha: float = RunSpec.alpha
    d_max: int = RunSpec.d_max
    static_lengths: tuple[int, ...] | None = None  # None: bench.static_grid, 1..n, 2n and d_max
    alphas: tuple = (1.0, 2.2, 4.0, 8.0, 16.0, AUTO)  # paper Table 4 style, up to the paper's own
    # alpha = T / (tau c), about 13-16 on a CPU profile, and that alpha set online ("auto")
    d_maxes: tuple[int, ...] = (15, 24, 32, 48, 60)  # paper Fig. 4 style, up to FailFast's cap
    seed: int = RunSpec.seed
    annotate: tuple[str, ...] = POLICY_MODES  # modes that get MAD to d*: every chain policy
    drafter: str | None = None  # None: the pair's default
    node_budgets: tuple[int, ...] = (16, 32)  # the chain-vs-tree runs' node budgets (paper: 64..512 on GPUs)
    tree_drafter: str = "dflash"  # trees need per-position candidates: the block-diffusion drafter
    quick: bool = False  # every table says "quick": the sample is too small for the conclusions of a full run

    def lengths(self, n: int) -> tuple[int, ...]:
        return self.static_lengths or static_grid(n, self.d_max)

    def checked(self, n: int, context: int | None = None) -> tuple["ReportPlan", list[str]]:
        """This plan with every knob clamped as any run's (`BenchSpec.checked` of each run it makes,
        `sweep.checked_grid` for the sensitivity grids) for a drafter with n drafts per step and the
        target's context window; values that became equal are kept once, and each change is said once."""
        from .sweep import checked_grid

        if not self.temperatures:
            raise ValueError("a report needs at least one temperature")
        # d_max first: the default static lengths (`static_grid`) are made from it (its note only:
        # the other fields of this probe are RunSpec's defaults, not the plan's)
        first = RunSpec(d_max=self.d_max).checked(n, context)
        plan, notes = replace(self, d_max=first.spec.d_max), [first.notes["d_max"]] if "d_max" in first.notes else []
        temperatures = []
        for t in plan.temperatures:
            main, said = plan.main_spec(n, t).checked(n, context)
            trees, more = plan.tree_spec(n, t).checked(n, context)
            temperatures.append(main.temperature)
            notes += said + more
        alphas, d_maxes, more = checked_grid(plan.alphas, plan.d_maxes, n, context)
        fixed = dict(
            temperatures=tuple(dict.fromkeys(temperatures)),
            alpha=main.alpha,
            d_max=main.d_max,
            max_new_tokens=main.max_new_tokens,
            seed=main.seed,
            static_lengths=main.static_lengths if self.static_lengths else None,
            node_budgets=trees.node_budgets,
            alphas=alphas,
            d_maxes=d_maxes,
        )
        return replace(plan, **fixed), list(dict.fromkeys(notes + more))

    def main_spec(self, n: int, temperature: float) -> BenchSpec:
        return BenchSpec(
            modes=ALL_MODES,
            max_new_tokens=self.max_new_tokens,
            temperature=temperature,
            seed=self.seed,
            alpha=self.alpha,
            d_max=self.d_max,
            static_lengths=self.lengths(n),
            annotate=self.annotate,
            drafter=self.drafter,
            published=True,
        )

    def tree_spec(self, n: int, temperature: float) -> BenchSpec:
        """Chains against trees on one drafter: AR, static d = n, LibraSpec, ddtree (depth n) and
        ddtree-libraspec at every node budget, none annotated (all timed alike)."""
        return BenchSpec(
            modes=TREE_RUN_MODES,
            max_new_tokens=self.max_new_tokens,
            temperature=temperature,
            seed=self.seed,
            alpha=self.alpha,
            d_max=self.d_max,
            static_lengths=(n,),
            annotate=False,
            drafter=self.tree_drafter,
            node_budgets=self.node_budgets,
        )

    def sweep_specs(self, n: int) -> list[tuple[str, float, BenchSpec]]:
        """(kind, value, spec) for each sensitivity run not already covered by the main run."""
        base = BenchSpec(
            modes=(AR, PAPER),
            max_new_tokens=self.max_new_tokens,
            temperature=0.0,
            seed=self.seed,
            alpha=self.alpha,
            d_max=self.d_max,
            annotate=False,
            drafter=self.drafter,
        )
        out = [("alpha", a, replace(base, alpha=a)) for a in self.alphas if a != self.alpha]
        out += [("d_max", d, replace(base, d_max=d)) for d in self.d_maxes if d != self.d_max]
        return out

    def longest(self, n: int) -> int:
        return max((self.main_spec(n, 0.0).longest(n), self.tree_spec(n, 0.0).longest(n)) + tuple(self.d_maxes))


# The default decodes 16 prompts x 128 tokens per suite, a sample whose intervals can separate modes (the
# --quick sample cannot). On a 2-core CPU with 2 threads and the 135M target (one AR step ~50 ms, a look-ahead of d_max
# ~0.2 s) `estimate_seconds` gives --quick 12-30 min and the default about 4-11 h on the embedded pair's
# profile (n = 7): longer than a session, so `--resume` finishes it over several invocations.
# `report` prints its estimate before it starts.
# every policy mode annotated as in a full run: the untimed look-ahead between policy and
# verification disturbs the CPU's caches, so annotating only some modes would time them unequally
QUICK = ReportPlan(prompts_per_suite=2, max_new_tokens=48, quick=True)
DEFAULT = ReportPlan()


@dataclass
class ReportData:
    """What `report_md.render` reads: every bench result and the run's facts."""

    plan: ReportPlan
    profile: LatencyProfile
    main: dict = field(default_factory=dict)  # (suite, temperature) -> BenchResult
    sweeps: dict = field(default_factory=dict)  # (suite, kind, value) -> BenchResult
    trees: dict = field(default_factory=dict)  # (suite, temperature) -> BenchResult of the chain-vs-tree run
    files: dict = field(default_factory=dict)  # (suite, temperature) -> OUT.json path
    figures: dict = field(default_factory=dict)  # name -> path relative to the markdown
    figure_note: str = ""
    command: str = ""
    bench_commands: list = field(default_factory=list)
    elapsed_s: float = 0.0
    estimate_s: tuple = (0.0, 0.0)  # this plan, tau = 3 and tau = 1
    default_estimate_s: tuple = (0.0, 0.0)  # the default plan on the same profile
    note: str = ""  # free text from --note, e.g. the state of the drafter
    resumed: int = 0  # runs read back from an earlier invocation (--resume), not decoded by this one


def estimate_seconds(plan: ReportPlan, profile: LatencyProfile, n: int) -> tuple[float, float]:
    """Decode time of the plan under the profile, for tau = 3 (optimistic) and tau = 1.

    AR costs one target forward per token; a chain round of a label costs round_time(d) at its
    static length (n for every other policy and the oracle) plus, when annotated, the oracle's
    look-ahead (round_time(d_max)), which the oracle mode always pays; a tree round costs a
    drafting step and a tree verification of its node budget (`cost.tree_round_s`). Prefill and
    Python overhead are not counted.
    """
    tokens = plan.prompts_per_suite * plan.max_new_tokens * len(plan.suites)
    look = profile.round_time(plan.d_max)

    def rounds(spec: BenchSpec) -> float:  # seconds of one round of every label of the spec
        total = 0.0
        for _, mode, value in spec.labels(n):
            kind = MODES[mode].kind
            if kind == "tree":
                total += tree_round_s(profile, [DIFFUSION], value, needs_features=True)
            elif kind != "ar":
                annotated = kind == "oracle" or mode in spec.annotated()
                total += profile.round_time(value if mode == BASELINE else n) + (look if annotated else 0.0)
        return total

    per_round = rounds(plan.main_spec(n, 0.0)) + rounds(plan.tree_spec(n, 0.0))
    sweep_round = sum(rounds(spec) for _, _, spec in plan.sweep_specs(n))
    ars = 2 * len(plan.temperatures) + len(plan.sweep_specs(n))  # the main and the tree runs, each sweep run
    return tuple(
        tokens * (ars * profile.ar_token_time() + (len(plan.temperatures) * per_round + sweep_round) / tau)
        for tau in (3.0, 1.0)
    )


def suite_prompts(suite: str, limit: int, folder: Path = PROMPTS_DIR) -> tuple[str, list[str]]:
    path = suite_path(suite, folder)
    return str(path), read_prompts(path)[:limit]


def job_key(pair, prompts: list[str], spec: BenchSpec, profile: LatencyProfile) -> str:
    """What makes two runs of one job interchangeable: the spec, the prompts, the pair and its files,
    the library's source, the latency profile, the software, the machine and its thread count (SHA-256)."""
    doc = {
        "spec": asdict(spec),
        "prompts": prompts,
        "model": pair.name,
        "source": source_digest(),
        "files": [f["sha256"] for f in model_files(pair, spec.drafter or pair.default_drafter)],
        "profile": profile.to_dict(),
        "versions": versions(),
        "machine": machine_description(),
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


def run_report(
    pair,
    plan: ReportPlan,
    data_dir: str,
    log: Callable[[str], None] = lambda s: None,
    progress: bool = False,
    profile: LatencyProfile | None = None,
    resume: bool = False,
) -> ReportData:
    """Run every main and sensitivity bench of `plan`; JSON and parquet go to `data_dir`.

    Every result carries its `job_key`. With `resume`, a job whose result file exists with the same
    key is read back instead of decoded again, so a report longer than a session can be finished by
    the same command later; a job whose code, files, profile, spec or prompts changed is decoded anew.
    """
    n = pair.n
    plan, notes = plan.checked(n, pair.max_context)  # a no-op for a plan `run` checked already
    for note in notes:
        log(f"report: corrected {note}")
    longest = plan.longest(n)
    profile = profile or profile_reaching(pair, longest)
    data = ReportData(plan=plan, profile=profile)
    start = time.perf_counter()
    jobs = [(s, t, plan.main_spec(n, t)) for s in plan.suites for t in plan.temperatures]
    jobs += [(s, ("trees", t), plan.tree_spec(n, t)) for s in plan.suites for t in plan.temperatures]
    jobs += [(s, (kind, value), spec) for s in plan.suites for kind, value, spec in plan.sweep_specs(n)]
    for step, (suite, key, spec) in enumerate(jobs, start=1):
        path, prompts = suite_prompts(suite, plan.prompts_per_suite)
        what = f"T={key:g}" if isinstance(key, float) else f"{key[0]}={alpha_label(key[1])}"
        name = (
            f"{suite}-T{key:g}"
            if isinstance(key, float)
            else f"{suite}-trees-T{key[1]:g}"
            if key[0] == "trees"
            else f"{suite}-{key[0]}{alpha_label(key[1])}"
        )
        out = os.path.join(data_dir, f"{name}.json")
        wanted = job_key(pair, prompts, spec, profile)
        if resume and stored_key(out) == wanted:
            log(f"[{step}/{len(jobs)}] {suite} {what}: read back from {shown_path(out)} (same job key)")
            result = read_result(out)
            data.resumed += 1
        else:
            log(f"[{step}/{len(jobs)}] {suite} {what} ({time.perf_counter() - start:.0f} s so far)")
            result = run_bench(pair, prompts, spec, profile=profile, progress=progress, source=path)
            result.summary["job_key"] = wanted
            write_result(result, out)
        if isinstance(key, float):
            data.main[(suite, key)] = result
            data.files[(suite, key)] = out
            data.bench_commands.append(bench_command(path, spec, pair.name, out, plan.prompts_per_suite))
        elif key[0] == "trees":
            data.trees[(suite, key[1])] = result
            data.bench_commands.append(bench_command(path, spec, pair.name, out, plan.prompts_per_suite))
        else:
            data.sweeps[(suite,) + key] = result
    data.elapsed_s = time.perf_counter() - start
    return data


def saved_profile(path: Path, pair, longest: int) -> LatencyProfile | None:
    """The profile an earlier invocation saved, if it is this pair's on this machine and reaches
    `longest` + 1 tokens and its blocks; else None (damaged, another setup: measure again)."""
    try:
        profile = LatencyProfile.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    same = profile.meta.get("pair") == pair.name and all(
        profile.meta.get(k) == v for k, v in machine_description().items()
    )
    reaches = len(profile.verify_s) >= longest + 1 and len(profile.draft_s) >= -(-longest // pair.n)
    return profile if same and reaches else None


def stored_key(out: str) -> str | None:
    """The job key a result file was written with (None: no file, damaged, or older than keys)."""
    try:
        with open(out, encoding="utf-8") as handle:
            document = json.load(handle)
    except (OSError, ValueError):
        return None
    key = document.get("job_key") if isinstance(document, dict) else None
    return key if os.path.exists(records_path(out)) else None


def bench_command(prompts: str, spec: BenchSpec, model: str, out: str, limit: int) -> str:
    """The `bench` command line that reproduces one main run on its own."""
    prompts, out = shown_path(prompts), shown_path(out)
    lengths = ",".join(str(L) for L in spec.static_lengths or ())
    return (
        f"python -m libraspec bench --prompts {prompts} --modes {','.join(spec.modes)} "
        f"--static-lengths {lengths} --alpha {alpha_label(spec.alpha)} --d-max {spec.d_max} "
        f"--annotate {','.join(spec.annotated()) or 'none'} {'--published ' if spec.published else ''}"
        + (f"--drafter {spec.drafter} " if spec.drafter else "")
        + (f"--node-budget {','.join(map(str, spec.node_budgets))} " if set(spec.modes) & set(TREE_MODES) else "")
        + f"--max-new-tokens {spec.max_new_tokens} --temperature {spec.temperature:g} "
        f"--seed {spec.seed} --limit {limit} --model {model} --threads {torch.get_num_threads()} "
        f"--out {out}"
    )


# -- figures -------------------------------------------------------------------------------


def can_export_png() -> bool:
    return importlib.util.find_spec("kaleido") is not None


def save_figures(figures: dict, folder: str, markdown_dir: str, fmt: str = "auto") -> tuple[dict, str]:
    """Write Plotly figures as PNG (kaleido + a Chromium) or, failing that, self-contained HTML.

    Returns {name: path relative to the markdown} and a sentence saying which format was used.
    """
    os.makedirs(folder, exist_ok=True)
    names = list(figures)
    if fmt in ("auto", "png") and can_export_png():
        import plotly.io as pio

        paths = [os.path.join(folder, f"{name}.png") for name in names]
        try:
            pio.write_images([figures[k] for k in names], paths, width=900, scale=1)
            return {
                k: os.path.relpath(p, markdown_dir) for k, p in zip(names, paths)
            }, "Figures are PNG files exported with kaleido through the system Chromium."
        except (ValueError, RuntimeError, OSError) as err:
            if fmt == "png":
                raise ValueError(f"PNG export failed: {err}") from err
            reason = f"PNG export failed ({type(err).__name__}: {err})"
    elif fmt == "png":
        raise ValueError("PNG export needs the kaleido package (pip install kaleido==1.5.0) and Chromium")
    else:
        reason = "kaleido is not installed" if fmt == "auto" else "HTML was asked for"
    out = {}
    for name in names:
        path = os.path.join(folder, f"{name}.html")
        figures[name].write_html(path, include_plotlyjs=True, full_html=True)  # offline: plotly.js inlined
        out[name] = os.path.relpath(path, markdown_dir)
    return out, f"Figures are self-contained HTML files (plotly.js inlined, viewable offline): {reason}."


def build_figures(data: ReportData) -> dict:
    """One length trajectory per suite (prompt 0, temperature 0) and the latency profile."""
    from ..views.plots import length_figure, profile_figure

    figures = {"profile": profile_figure(data.profile)}
    for suite in data.plan.suites:
        result = data.main.get((suite, 0.0)) or next((r for (s, _), r in data.main.items() if s == suite), None)
        if result is None:
            continue
        best = result.summary["config"]["best_static"]
        frame = result.frame()
        keep = frame["label"].isin([best, PAPER, ORACLE]) & (frame["prompt_index"] == 0)
        fig = length_figure(frame[keep])
        fig.update_layout(title=dict(text=f"{suite}, prompt 0: d per round (diamonds: d*)"))
        figures[f"trajectory-{suite}"] = fig
    return figures


# -- CLI ---------------------------------------------------------------------------------------

HELP = "decode the benchmark suites on a model pair and write the measured report"


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(",") if x.strip())


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def add_arguments(parser) -> None:
    parser.add_argument("--out", default="benchmarks/results/measured/REPORT.md")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"{QUICK.prompts_per_suite} prompts x {QUICK.max_new_tokens} tokens per suite "
        f"(default {DEFAULT.prompts_per_suite} x {DEFAULT.max_new_tokens})",
    )
    parser.add_argument("--model", default=None, help="model pair (default: the registry default)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: unchanged)")
    parser.add_argument("--prompts-per-suite", type=int, default=None)
    parser.add_argument("--max-new-tokens", type=int, default=None)
    parser.add_argument(
        "--suites",
        default=",".join(SUITES),
        help=f"assets/prompts suites or public ones read from {shown_path(PUBLIC_DATA)}: {', '.join(PUBLIC_SUITES)}",
    )
    parser.add_argument("--temperatures", default="0,1")
    parser.add_argument("--static-lengths", default=None, help="comma list; 0 means n (default: 1..n, 2n and d_max)")
    parser.add_argument(
        "--annotate",
        default=None,
        help="policy modes whose rounds get the oracle d* (MAD); 'none' for none (default: the plan's)",
    )
    parser.add_argument(
        "--alphas",
        default=",".join(alpha_label(a) for a in DEFAULT.alphas),
        help="LibraSpec alphas of the sensitivity runs: numbers and auto",
    )
    parser.add_argument("--d-maxes", default=",".join(str(d) for d in DEFAULT.d_maxes))
    parser.add_argument(
        "--data-dir", default=None, help="per-run JSON/parquet (default: benchmarks/results beside --out)"
    )
    parser.add_argument("--figures", choices=("auto", "png", "html"), default="auto")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument("--note", default="", help="a sentence to print in the report's setup section")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="read back runs whose result files carry the same job key (same code, files, profile, "
        "prompts and settings) and use the profile saved in the data folder: a report longer "
        "than a session is finished by running the same command again",
    )
    add_drafter_argument(parser)


def plan_from_args(args) -> ReportPlan:
    base = QUICK if args.quick else DEFAULT
    plan = replace(
        base,
        suites=tuple(s.strip() for s in args.suites.split(",") if s.strip()),
        temperatures=_floats(args.temperatures),
        alphas=parse_alphas(args.alphas),
        d_maxes=_ints(args.d_maxes),
        static_lengths=_ints(args.static_lengths) if args.static_lengths else None,
        drafter=args.drafter,
    )
    if args.annotate is not None:
        plan = replace(plan, annotate=parse_annotate(args.annotate))
    if args.prompts_per_suite is not None:
        plan = replace(plan, prompts_per_suite=args.prompts_per_suite)
    if args.max_new_tokens is not None:
        plan = replace(plan, max_new_tokens=args.max_new_tokens)
    if plan.prompts_per_suite < 1 or not plan.suites or not plan.temperatures:
        raise ValueError("the report needs >= 1 prompt per suite, one suite and one temperature")
    return plan


def run(args) -> int:
    from ..models.registry import load_pair

    set_threads(args.threads)
    plan = plan_from_args(args)
    markdown_dir = os.path.dirname(os.path.abspath(args.out))
    data_dir = args.data_dir or os.path.join(markdown_dir, "benchmarks", "results")
    figure_dir = os.path.join(markdown_dir, "benchmarks", "figures")

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    load = load_average()
    if load is not None and load > BUSY_LOAD:
        log(
            f"warning: the 1-minute load average is {load:.2f} (> {BUSY_LOAD:g}): other processes are running, "
            f"so measured times will carry their load (the report's header will say so)"
        )
    pair = load_pair(args.model)
    n = pair.n
    plan, notes = plan.checked(n, pair.max_context)
    for note in notes:  # out of range: clamped, as everywhere, and said
        log(f"report: corrected {note}")
    longest = plan.longest(n)
    saved = Path(data_dir) / "profile.json"
    profile = saved_profile(saved, pair, longest) if args.resume else None
    if profile is not None:
        log(f"--resume: the latency profile saved by the earlier invocation ({shown_path(saved)})")
    else:
        log(f"measuring (or loading) the latency profile of {pair.name} up to {longest + 1} tokens ...")
        profile = profile_reaching(pair, longest)
        atomic_write_text(saved, json.dumps(profile.to_dict(), indent=1))
    low, high = estimate_seconds(plan, profile, n)
    log(
        f"estimated decode time: {low / 60:.1f} min (tau = 3) to {high / 60:.1f} min (tau = 1), "
        f"{torch.get_num_threads()} thread(s)"
    )
    data = run_report(pair, plan, data_dir, log, progress=not args.quiet, profile=profile, resume=args.resume)
    data.estimate_s = (low, high)
    data.default_estimate_s = estimate_seconds(DEFAULT, profile, n)
    data.command = "python -m libraspec " + shlex.join(getattr(args, "argv", ["report", "--out", args.out]))
    data.note = args.note
    data.figures, data.figure_note = save_figures(build_figures(data), figure_dir, markdown_dir, args.figures)
    text = render(pair, data, markdown_dir, DEFAULT)
    atomic_write_text(args.out, text)
    log(f"wrote {args.out} ({data.elapsed_s / 60:.1f} min of decoding)")
    return 0
