"""alpha x d_max sweep of LibraSpec, and `python -m libraspec sweep`.

AR decodes each prompt once. Greedy, the grid comes from replay: what the drafter proposes from
every position of each AR text is recorded once (`analysis.trace`), every cell (alpha, d_max) is
replayed from it in LibraSpec mode with the oracle annotation (d* over 1..d_max; modeled only,
seconds for the whole grid), and the few best cells by modeled speedup are then decoded for
real as a check (measured speedup, and whether their decisions equal the replay's). Beside the
grid, the other chain rules of the registry (`whatif.RULES`: LibraSpec priced, G4, FailFast, the
serving engines' rules) are replayed from the same traces at each d_max (their only knob here; the
rest keep their `RunSpec` defaults), modeled only: rows whose `mode` names the rule, alpha NaN for
a rule that does not read it; the heat maps, `analysis.best_cell` and the decoded cells stay
LibraSpec's. Sampling, every cell decodes every prompt, and no rule is replayed (a sampled text
is not fixed, so there is no trace to replay from). alpha may be "auto":
`autoalpha.AutoAlphaLibraSpecPolicy`, which sets alpha = T^verify / (tau * c) from the latency
profile and the running tau (section 3.4).

Per cell (and per rule x d_max), totals over prompts (docs/ARCHITECTURE.md, "What is timed"; as in `records.summarize`):
speedup_measured = AR seconds per token / cell seconds per token, speedup_modeled the
same with the latency profile's times, tau = tokens per round, mad_vs_oracle =
mean |d - d*| over rounds, alpha_used = mean alpha of the rounds (the value itself when
fixed), noise_s = the timing noise of wall_s (`records.timing_noise_s`), decisions = a digest of
every round's d (`decisions_digest`). `analysis.best_cell` crowns a cell only when it is ahead of every
other beyond noise and no other cell made its decisions. Symbols: alpha, d_max, n (block size), d, d*, tau.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import threading
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import pandas as pd

from ..analysis.replay import ReplayDecoder
from ..analysis.trace import DraftTrace, iter_trace
from ..analysis.whatif import RULES
from ..engine import DecodeConfig, SpeculativeDecoder
from ..modes import AR, MODES, PAPER
from ..records import RoundRecord, committed_text, summarize, timing_noise_s
from ..spec import LIBRARY_CAPS, Caps, RunSpec
from .driver import AUTO, Cancelled, Job, alpha_label, alpha_policy, decode_grid, parse_alphas
from .grids import decision_digest

DEFAULT_ALPHAS = (1.6, 2.0, 2.2, 2.6, AUTO)  # around the paper's 2.0 (Fast-dLLM) and 2.2 (DFlash)
DEFAULT_D_MAXES = (16, 24, 32, 48)  # around the paper's 24 for DFlash
COLUMNS = [
    "mode",  # PAPER for the grid's cells, else the rule of `whatif.RULES` replayed beside them
    "alpha",  # NaN for a rule that does not read alpha
    "d_max",
    "prompts",
    "tokens",
    "rounds",
    "tau",
    "mean_d",
    "alpha_used",
    "wall_s",
    "noise_s",
    "modeled_s",
    "speedup_measured",
    "speedup_modeled",
    "mad_vs_oracle",
    "decisions",
    "check",  # "replay" (modeled only), "decoded..." (measured too)
]
DECODED_CELLS = 3  # the best cells of a replayed grid decoded for real
MAX_NEW_TOKENS = 64  # a grid decodes every cell (and AR) per prompt: answers shorter than a race's


def parse_d_maxes(text: str | Sequence) -> tuple[int, ...]:
    """ "16, 24" -> (16, 24): integers (their range is `RunSpec.checked`'s to clamp), no repeats."""
    items = [str(x).strip() for x in (text.split(",") if isinstance(text, str) else text)]
    try:
        out = tuple(int(item) for item in items if item)
    except ValueError:
        raise ValueError(f"d_max values must be integers, got {text!r}") from None
    if not out or len(set(out)) != len(out):
        raise ValueError(f"d_max values must be distinct integers, got {text!r}")
    return out


def checked_grid(
    alphas, d_maxes, n: int, context: int | None = None, caps: Caps = LIBRARY_CAPS
) -> tuple[tuple, tuple[int, ...], list[str]]:
    """The grid's alphas and d_max values parsed and clamped as any run's knobs (`RunSpec.checked`
    under `caps`, for a drafter with n drafts per step and the target's `context` window), values
    that became equal kept once, and a note per change ("auto" stays "auto")."""
    out_alphas, out_d, notes = [], [], []
    for alpha in parse_alphas(alphas):
        checked = RunSpec(alpha=1.0 if alpha == AUTO else alpha).checked(n, caps=caps)
        out_alphas.append(AUTO if alpha == AUTO else checked.spec.alpha)
        notes += [checked.notes["alpha"]] if "alpha" in checked.notes else []
    for d_max in parse_d_maxes(d_maxes):
        checked = RunSpec(d_max=d_max, max_new_tokens=1).checked(n, context, caps=caps)
        out_d.append(checked.spec.d_max)
        notes += [checked.notes["d_max"]] if "d_max" in checked.notes else []
    return tuple(dict.fromkeys(out_alphas)), tuple(dict.fromkeys(out_d)), notes


@dataclass(frozen=True)
class SweepEvent:
    """Progress after one run: runs done of total, what ran, and the finished cells so far."""

    done: int
    total: int
    label: str
    frame: pd.DataFrame  # COLUMNS, one row per finished cell
    cancelled: bool = False
    finished: bool = False  # the last event of a sweep that ran to its end


def _cell_row(alpha, d_max: int, runs: list[list[RoundRecord]], ar: list[RoundRecord], mode: str = PAPER) -> dict:
    """One row of COLUMNS (but `check`) from a cell's (or `mode`'s, at alpha None) runs over the prompts."""
    records = [r for run in runs for r in run]
    alphas_used = [r.alpha for r in records if r.alpha is not None]
    s = summarize(records, ar)
    return {
        "mode": mode,
        "alpha": float("nan") if alpha is None else alpha_label(alpha),
        "d_max": d_max,
        "prompts": len(runs),
        "tokens": s.tokens,
        "rounds": s.rounds,
        "tau": s.tau,
        "mean_d": sum(r.chosen_length for r in records) / len(records),
        "alpha_used": sum(alphas_used) / len(alphas_used) if alphas_used else float("nan"),
        "wall_s": s.seconds,
        "noise_s": timing_noise_s(records),
        "modeled_s": s.modeled_seconds,
        "speedup_measured": s.speedup_measured,
        "speedup_modeled": s.speedup_modeled,
        "mad_vs_oracle": s.mad_vs_oracle,
        "decisions": decisions_digest(runs),
    }


def decisions_digest(runs: list[list[RoundRecord]]) -> str:
    """A short digest of every round's work, prompt by prompt: its d, the drafting steps it ran, its
    tree's size and what it accepted. Two cells with the same digest did the same work, so their
    measured times differ by noise alone (the same d after different drafting does not count)."""
    return hashlib.sha1(",".join(decision_digest(run) for run in runs).encode()).hexdigest()[:12]


def _cell_config(configs: list[DecodeConfig], d_max: int, index: int) -> DecodeConfig:
    return dataclasses.replace(configs[index], lookahead=d_max, annotate_oracle=True)


def _cell_policy(decoder, alpha, d_max: int):
    """A cell's fresh LibraSpec policy (alpha and d_max checked by `checked_grid`); "auto" reads the
    decoder's profile as it is when the run starts."""
    return alpha_policy(PAPER, RunSpec(d_max=d_max).checked(decoder.n).spec, alpha, decoder.profile)


def _cell_jobs(decoder, configs, cells: dict) -> list[Job]:
    return [
        Job(
            label,
            PAPER,
            functools.partial(_cell_policy, decoder, alpha, d_max),
            functools.partial(_cell_config, configs, d_max),
        )
        for label, (alpha, d_max) in cells.items()
    ]


def iter_sweep(
    decoder: SpeculativeDecoder,
    prompts_ids: Sequence[Sequence[int]],
    alphas,
    d_maxes,
    config: DecodeConfig,
    cancel: threading.Event | None = None,
    decode: int | None = DECODED_CELLS,
    rules: bool = True,
) -> Iterator[SweepEvent]:
    """Run the sweep, yielding a `SweepEvent` after every decoding run (and every few traced positions).

    AR runs first (once per prompt; prompt i uses seed config.seed + i). Greedy with `decode` set:
    a draft trace of each AR text (`analysis.trace`), every cell replayed from the traces (modeled
    columns and the oracle's d*; measured columns NaN, `check` "replay"), with `rules` every rule of
    `whatif.RULES` at each d_max replayed from the same traces (`_rule_rows`: rows after the cells,
    modeled only), then the `decode` cells of highest modeled speedup, one per set of identical
    decisions, decoded for real (`check` says whether their decisions equal their replay's).
    Sampling, or `decode` None: every cell decoded (alpha outer, d_max inner, `driver.decode_grid`)
    and no rule replayed. `cancel` is checked before every run: once
    set, the last event carries cancelled=True and the cells finished so far.
    """
    n = decoder.n
    alphas, d_maxes, _ = checked_grid(alphas, d_maxes, n)  # callers say what their own check changed
    prompts_ids = [list(p) for p in prompts_ids]
    if not prompts_ids:
        raise ValueError("no prompts to sweep")
    if decode is not None and decode < 0:
        raise ValueError(f"cells to decode must be >= 0, got {decode}")
    configs = [dataclasses.replace(config, seed=config.seed + i) for i in range(len(prompts_ids))]
    cells = {f"alpha = {alpha_label(alpha)}, d_max = {d_max}": (alpha, d_max) for alpha in alphas for d_max in d_maxes}
    replayed = decode is not None and config.sampling.greedy
    jobs = [Job("AR", AR, None, configs.__getitem__)]
    if not replayed:
        jobs += _cell_jobs(decoder, configs, cells)
    total = len(prompts_ids) * (1 + (min(decode, len(cells)) if replayed else len(cells)))
    ar_runs: list[list[RoundRecord]] = [[] for _ in prompts_ids]  # AR's rounds, per prompt
    runs: list[list[RoundRecord]] = []
    rows: list[dict] = []
    done = 0
    for event in decode_grid(decoder, prompts_ids, jobs, outer="jobs", cancel=cancel):
        if isinstance(event, Cancelled):
            yield SweepEvent(done, total, "cancelled", pd.DataFrame(rows, columns=COLUMNS), True)
            return
        done += 1
        if event.mode == AR:
            ar_runs[event.index] = event.records
        else:
            runs.append(event.records)
            if event.index == len(prompts_ids) - 1:
                rows.append(_cell_row(*cells[event.label], runs, _flat(ar_runs)) | {"check": "decoded"})
                runs = []
        yield SweepEvent(
            done,
            total,
            f"{event.label}, prompt {event.index + 1}/{len(prompts_ids)}",
            pd.DataFrame(rows, columns=COLUMNS),
            finished=not replayed and done == total,
        )
    if not replayed:
        return
    # traces of the AR texts, then every cell replayed (modeled, in seconds)
    ar = _flat(ar_runs)
    texts = [committed_text(run) for run in ar_runs]
    # the cells' texts are AR's: the oracle's look-aheads read them instead of a target forward
    configs = [dataclasses.replace(c, greedy_text=text) for c, text in zip(configs, texts)]
    traces = []
    for i, (ids, output) in enumerate(zip(prompts_ids, texts)):
        steps = iter_trace(decoder.pair, decoder.drafter.name, ids, output, config.max_new_tokens, max(d_maxes))
        for item in steps:
            if cancel is not None and cancel.is_set():
                yield SweepEvent(done, total, "cancelled", pd.DataFrame(rows, columns=COLUMNS), True)
                return
            if isinstance(item, DraftTrace):
                traces.append(item)
            elif item % 8 == 0 or item == len(output):
                label = f"recording the drafter's proposals, prompt {i + 1}/{len(prompts_ids)}: {item}/{len(output)}"
                yield SweepEvent(done, total, label, pd.DataFrame(rows, columns=COLUMNS))
    for label, (alpha, d_max) in cells.items():
        if cancel is not None and cancel.is_set():
            yield SweepEvent(done, total, "cancelled", pd.DataFrame(rows, columns=COLUMNS), True)
            return
        policy = functools.partial(_cell_policy, decoder, alpha, d_max)
        runs = [_replay_run(decoder, trace, PAPER, policy, d_max, configs[i]) for i, trace in enumerate(traces)]
        rows.append(_cell_row(alpha, d_max, runs, ar) | {"check": "replay"})
        yield SweepEvent(done, total, f"replayed {label}", pd.DataFrame(rows, columns=COLUMNS))
    # the best cells by modeled speedup, one per set of identical decisions, decoded for real
    speed = [row["speedup_modeled"] for row in rows]  # the cells only: the rules' rows come after
    order = sorted(range(len(rows)), key=lambda k: -speed[k] if math.isfinite(speed[k]) else math.inf)
    chosen, seen = [], set()
    for k in order:
        if rows[k]["decisions"] not in seen and len(chosen) < decode:
            seen.add(rows[k]["decisions"])
            chosen.append(k)
    for label, row in _rule_rows(decoder, traces, configs, d_maxes, ar) if rules else ():
        if cancel is not None and cancel.is_set():
            yield SweepEvent(done, total, "cancelled", pd.DataFrame(rows, columns=COLUMNS), True)
            return
        rows.append(row)
        yield SweepEvent(done, total, f"replayed {label}", pd.DataFrame(rows, columns=COLUMNS))
    total = len(prompts_ids) * (1 + len(chosen))  # fewer when fewer cells decided differently
    label = "every cell and rule replayed (modeled)" if rules else "every cell replayed (modeled)"
    yield SweepEvent(done, total, label, pd.DataFrame(rows, columns=COLUMNS), finished=not chosen)
    labels = list(cells)
    picked = {labels[k]: cells[labels[k]] for k in chosen}
    for event in decode_grid(decoder, prompts_ids, _cell_jobs(decoder, configs, picked), outer="jobs", cancel=cancel):
        if isinstance(event, Cancelled):
            yield SweepEvent(done, total, "cancelled", pd.DataFrame(rows, columns=COLUMNS), True)
            return
        done += 1
        if event.index == 0:
            runs = []
        runs.append(event.records)
        if event.index == len(prompts_ids) - 1:
            k = labels.index(event.label)
            same = decisions_digest(runs) == rows[k]["decisions"]
            check = "decoded: same decisions as its replay" if same else "decoded: decisions differ from its replay"
            rows[k] = _cell_row(*cells[event.label], runs, ar) | {"check": check}
        yield SweepEvent(
            done,
            total,
            f"decoding a best cell for real: {event.label}, prompt {event.index + 1}/{len(prompts_ids)}",
            pd.DataFrame(rows, columns=COLUMNS),
            finished=done == total,
        )


def _flat(runs: list[list[RoundRecord]]) -> list[RoundRecord]:
    return [r for run in runs for r in run]


def _replay_run(decoder, trace: DraftTrace, mode: str, policy, d_max: int, config: DecodeConfig) -> list[RoundRecord]:
    """`mode`'s rounds on one prompt with a fresh `policy()`, replayed from its trace as the engine
    would decode them, with the oracle's d* over 1..d_max."""
    replayer = ReplayDecoder.from_trace(trace, decoder.profile)
    cell = dataclasses.replace(config, lookahead=d_max, annotate_oracle=True)
    return list(replayer.run(list(trace.prompt), mode, policy(), cell))


def _rule_rows(decoder, traces, configs, d_maxes, ar) -> Iterator[tuple[str, dict]]:
    """(label, row) of every rule of `whatif.RULES` at each d_max, replayed from the cells' traces
    under the decoder's profile (a priced rule prices its choices with it too); the rule's other
    knobs keep their `RunSpec` defaults (FailFast's threshold and step, G4's first length resolved
    within d_max), alpha NaN unless the rule reads it; modeled only, `check` "replay"."""
    for mode in RULES:
        for d_max in d_maxes:
            spec = RunSpec(d_max=d_max).checked(decoder.n).spec
            policy = functools.partial(MODES[mode].policy, spec, decoder.profile)
            runs = [_replay_run(decoder, trace, mode, policy, d_max, configs[i]) for i, trace in enumerate(traces)]
            alpha = spec.alpha if "alpha" in MODES[mode].knobs else None
            yield f"{MODES[mode].label}, d_max = {d_max}", _cell_row(alpha, d_max, runs, ar, mode) | {"check": "replay"}


def run_sweep(
    decoder: SpeculativeDecoder,
    prompts_ids: Sequence[Sequence[int]],
    alphas,
    d_maxes,
    config: DecodeConfig,
    progress: Callable[[int, int, str], None] | None = None,
    cancel: threading.Event | None = None,
    decode: int | None = DECODED_CELLS,
    rules: bool = True,
) -> pd.DataFrame:
    """The whole sweep as one DataFrame (COLUMNS, one row per finished cell, then per rule x d_max).

    `progress(done, total, label)` is called after every run. A set `cancel` stops before
    the next run; the frame then holds the finished cells and attrs["cancelled"] is True.
    """
    frame, cancelled = pd.DataFrame(columns=COLUMNS), False
    for ev in iter_sweep(decoder, prompts_ids, alphas, d_maxes, config, cancel, decode, rules):
        frame, cancelled = ev.frame, ev.cancelled
        if progress is not None and not ev.cancelled:
            progress(ev.done, ev.total, ev.label)
    frame.attrs["cancelled"] = cancelled
    return frame


# -- CLI ---------------------------------------------------------------------------------------

HELP = (
    "decode a prompt file with LibraSpec over an alpha x d_max grid and write one CSV row per cell "
    "(greedy: and per other chain rule x d_max, replayed)"
)


def add_arguments(parser) -> None:
    from .bench import add_drafter_argument

    parser.add_argument("--prompts", required=True, help="JSONL file; lines carry prompt, question or turns")
    parser.add_argument(
        "--alphas", default=",".join(map(str, DEFAULT_ALPHAS)), help="comma list of alpha values or 'auto'"
    )
    parser.add_argument("--d-max", default=",".join(map(str, DEFAULT_D_MAXES)), help="comma list of d_max values")
    parser.add_argument("--max-new-tokens", type=int, default=MAX_NEW_TOKENS)
    parser.add_argument("--temperature", type=float, default=RunSpec.temperature, help="0 = greedy")
    parser.add_argument("--seed", type=int, default=RunSpec.seed, help="prompt i uses seed + i")
    parser.add_argument("--limit", type=int, default=None, help="use the first K prompts only")
    parser.add_argument(
        "--decode",
        default=str(DECODED_CELLS),
        help="greedy: cells decoded for real after the grid is replayed (the best by modeled speedup), or 'all'",
    )
    parser.add_argument("--model", default=None, help="model pair (default: the registry default)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: unchanged)")
    parser.add_argument(
        "--no-rules",
        action="store_true",
        help="greedy: skip the other chain rules (G4, FailFast, the engines' rules, ...) replayed at each d_max",
    )
    parser.add_argument("--out", required=True, help="OUT.csv, one row per (alpha, d_max) cell and per rule x d_max")
    add_drafter_argument(parser)
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def run(args) -> int:
    import sys

    from tqdm import tqdm

    from ..files import atomic_write_text
    from ..models.registry import load_pair
    from ..profiling import profile_reaching
    from .bench import read_limited, set_threads

    set_threads(args.threads)
    parse_alphas(args.alphas), parse_d_maxes(args.d_max)  # a grid that is not numbers: refused before any load
    prompts = read_limited(args.prompts, args.limit)
    pair = load_pair(args.model)
    ids = [pair.encode_prompt(p) for p in prompts]
    alphas, d_maxes, notes = checked_grid(args.alphas, args.d_max, pair.n, pair.max_context)
    decoding = ("max_new_tokens", "temperature", "seed")
    checked = RunSpec(
        d_max=max(d_maxes), max_new_tokens=args.max_new_tokens, temperature=args.temperature, seed=args.seed
    ).checked(pair.n, pair.max_context, max(map(len, ids), default=0))
    notes += [checked.notes[name] for name in decoding if name in checked.notes]
    config = DecodeConfig.of(checked.spec)
    for note in notes:
        print(f"sweep: corrected {note}", file=sys.stderr)
    longest = max(d_maxes)
    profile = profile_reaching(pair, longest, check=True)
    decoder = SpeculativeDecoder(pair, profile, drafter=args.drafter)
    bar = tqdm(
        total=None,
        desc="sweep",
        unit="run",
        file=sys.stderr,
        disable=args.quiet,
    )

    def progress(done: int, total: int, label: str) -> None:
        bar.total = total
        bar.set_postfix_str(label, refresh=False)
        bar.update(done - bar.n)

    decode = None if args.decode == "all" else int(args.decode)
    frame = run_sweep(decoder, ids, alphas, d_maxes, config, progress, None, decode, not args.no_rules)
    bar.close()
    atomic_write_text(args.out, frame.to_csv(index=False))
    return 0
