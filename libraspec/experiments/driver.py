"""One driver for every experiment loop: a decoder over prompts x jobs.

Benchmarks (`bench`), the alpha x d_max sweep (`sweep`), the drafter evaluation
(`train.evaluate`) and the app's fresh calibration run all decode a list of prompts in a
few jobs. A job is a label, a mode, a policy factory (called once per run, so every run
starts from a fresh policy) and a `DecodeConfig`, or a function of the prompt index that
returns one (prompt i with seed + i, for example). `decode_grid` runs every (prompt, job)
pair in a fixed order and yields a `RunDone` after each run; the caller counts progress
from it, keeps the records it wants, and stops the grid between runs with `cancel`.

With `rounds=True` the grid also yields a `RoundDone` after every round, so a caller that
advances the generator under a lock (the app's `Session.exclusive`) holds the lock for one
round, not a whole run. Policies come from the mode registry (docs/ARCHITECTURE.md,
section "Modes"); `mode_job` builds a job whose policy is `MODES[mode].policy(settings)`.
`alpha_policy` makes any mode's policy with alpha a number or "auto" (autoalpha.py), for the
benchmarks, the grids and the sweep alike.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from contextlib import closing
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

from ..analysis.autoalpha import AutoAlphaLibraSpecPolicy
from ..engine import DecodeConfig, SpeculativeDecoder
from ..modes import MODES, get_mode
from ..policy import LengthPolicy, LibraSpecPolicy
from ..records import RoundRecord
from ..spec import RunSpec
from ..tree_policy import TreePolicy

ORDERS = ("prompts", "jobs")  # the outer loop: every job of a prompt first, or every prompt of a job
AUTO = "auto"  # LibraSpec's alpha set online from the latency profile (autoalpha.py)


@dataclass(frozen=True)
class Job:
    """One way of decoding every prompt: `policy()` makes a fresh policy for each run (None for AR
    and the oracle); `config` is one DecodeConfig or a function of the prompt index."""

    label: str
    mode: str
    policy: Callable[[], LengthPolicy | None] | None
    config: DecodeConfig | Callable[[int], DecodeConfig]

    def config_for(self, index: int) -> DecodeConfig:
        return self.config if isinstance(self.config, DecodeConfig) else self.config(index)

    def new_policy(self) -> LengthPolicy | None:
        return None if self.policy is None else self.policy()


def mode_job(
    label: str,
    mode: str,
    settings: RunSpec,
    config: DecodeConfig | Callable[[int], DecodeConfig],
    profile=None,
) -> Job:
    """A job whose policy is the registry's: `MODES[mode].policy(settings, profile)`, fresh for every
    run (`profile`: the decoder's, which a priced mode needs)."""
    return Job(label, mode, functools.partial(MODES[mode].policy, settings, profile), config)


def parse_alphas(text: str | Sequence) -> tuple:
    """ "1.6, 2.2, auto" -> (1.6, 2.2, "auto"): finite numbers (their range is `RunSpec.checked`'s
    to clamp) or "auto", no repeats."""
    items = [str(x).strip() for x in (text.split(",") if isinstance(text, str) else text)]
    out = []
    for item in filter(None, items):
        if item.lower() == AUTO:
            out.append(AUTO)
            continue
        try:
            value = float(item)
        except ValueError:
            raise ValueError(f"alpha values must be numbers or 'auto', got {item!r}") from None
        if not math.isfinite(value):
            raise ValueError(f"alpha values must be finite, got {item!r}")
        out.append(value)
    if not out:
        raise ValueError("give at least one alpha value (numbers or 'auto')")
    if len(set(out)) != len(out):
        raise ValueError(f"alpha values listed twice: {', '.join(map(str, out))}")
    return tuple(out)


def alpha_label(alpha) -> str:
    """2.2 -> "2.2", "auto" -> "auto"."""
    return AUTO if alpha == AUTO else f"{float(alpha):g}"


def alpha_policy(mode: str, settings: RunSpec, alpha, profile=None) -> LengthPolicy | None:
    """A fresh policy of `mode` (the registry's, under `settings`) with `alpha` a number or "auto":
    then the LibraSpec policy inside it (a chain's own, a tree's depth policy) sets alpha online
    from the decoder's `profile` and the rounds so far (autoalpha.py); a mode that reads alpha
    without one refuses (`check_alpha`), a mode that does not read alpha ignores it."""
    entry = get_mode(mode)
    if alpha != AUTO:
        return entry.policy(dataclasses.replace(settings, alpha=float(alpha)), profile)
    if "alpha" not in entry.knobs:
        return entry.policy(settings, profile)
    check_alpha(mode, alpha)
    return _auto_alpha(entry.policy(settings, profile), profile)


def check_alpha(mode: str, alpha) -> None:
    """Refuse alpha "auto" for a mode that reads alpha but holds no LibraSpec policy to set it in
    (ddtree-marginal), before anything is loaded or measured."""
    entry = get_mode(mode)
    if alpha == AUTO and "alpha" in entry.knobs and not entry.priced:
        policy = entry.policy(RunSpec().checked(1).spec)
        chain = policy.depth_policy if isinstance(policy, TreePolicy) else policy  # a tree's depth rule
        if not isinstance(chain, LibraSpecPolicy):
            raise ValueError(
                f"alpha 'auto' sets a LibraSpec policy's alpha online; mode {mode!r} has none: give a number"
            )


def _auto_alpha(policy, profile) -> LengthPolicy:
    if isinstance(policy, TreePolicy):
        return TreePolicy(_auto_alpha(policy.depth_policy, profile), policy.node_budget)
    return AutoAlphaLibraSpecPolicy(profile, policy.d_max)


@dataclass(frozen=True)
class RunDone:
    """One finished run: prompt `index` decoded by the job `label`; `done` runs of `total` finished."""

    index: int
    label: str
    mode: str
    records: list[RoundRecord]
    done: int
    total: int


@dataclass(frozen=True)
class RoundDone:
    """One round of the run in progress (only with rounds=True); `done` counts finished runs."""

    index: int
    label: str
    record: RoundRecord
    done: int
    total: int


@dataclass(frozen=True)
class Cancelled:
    """The grid stopped before its next run: `done` runs of `total` had finished."""

    done: int
    total: int


def grid_order(prompts: int, jobs: Sequence[Job], outer: str = "prompts") -> list[tuple[int, Job]]:
    """(prompt index, job) in the order they run."""
    if outer not in ORDERS:
        raise ValueError(f"outer must be one of {', '.join(ORDERS)}, got {outer!r}")
    if outer == "prompts":
        return [(index, job) for index in range(prompts) for job in jobs]
    return [(index, job) for job in jobs for index in range(prompts)]


def decode_grid(
    decoder: SpeculativeDecoder,
    prompt_ids: Sequence[Sequence[int]],
    jobs: Sequence[Job],
    *,
    outer: str = "prompts",
    cancel=None,
    rounds: bool = False,
) -> Iterator[RunDone | RoundDone | Cancelled]:
    """Decode every prompt with every job; yields a `RunDone` after each run.

    `outer="prompts"` runs every job on prompt 0, then on prompt 1, ... (load on the machine
    falls on every job alike); `outer="jobs"` runs job 0 on every prompt, then job 1, ...
    `cancel` (anything with `is_set()`, e.g. a threading.Event) is checked before every run:
    once set, the grid yields `Cancelled` and ends. `rounds=True` also yields a `RoundDone`
    after every round. Labels must be distinct (callers key their records by label).
    """
    labels = [job.label for job in jobs]
    if len(set(labels)) != len(labels):
        raise ValueError(f"job labels must be distinct, got {labels}")
    plan = grid_order(len(prompt_ids), jobs, outer)
    total = len(plan)
    for done, (index, job) in enumerate(plan):
        if cancel is not None and cancel.is_set():
            yield Cancelled(done, total)
            return
        records: list[RoundRecord] = []
        with closing(decoder.run(prompt_ids[index], job.mode, job.new_policy(), job.config_for(index))) as run:
            for record in run:
                records.append(record)
                if rounds:
                    yield RoundDone(index, job.label, record, done, total)
        yield RunDone(index, job.label, job.mode, records, done + 1, total)
