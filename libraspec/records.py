"""Round records: the one interface between the engine and every view.

Each decoding round yields one frozen `RoundRecord`; the app, the benchmarks and the
trace files read only these. Symbols follow the LibraSpec paper: d is the speculative
length submitted for verification, q_i the drafter confidence of draft i, eps_i the
Algorithm 1 bound of position i, tau = accepted + 1 tokens committed per round
(accepted alone when an accepted draft is an EOS).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from .files import atomic_write


@dataclass(frozen=True)
class PolicyStep:
    """One iteration of Algorithm 1 (lines 5-13): d before, eps*, d after, budget B."""

    d_before: int
    eps_star: int
    d_after: int
    budget: int  # B after the iteration (drafted tokens not yet inside d)
    blocks_requested: int  # blocks drafted by this iteration (line 12), 0 if none
    rollback: bool  # True when eps* <= d ended the loop (line 8)

    @property
    def action(self) -> str:
        """The iteration in one word (`step_action`): "extend", "roll back" or "stop"."""
        return step_action(self.d_before, self.d_after, self.rollback)


def step_action(d_before: int, d_after: int, ended: bool) -> str:
    """Algorithm 1's vocabulary for one iteration: "extend" (eps* > d: d grows to min(eps*, d_max)),
    "roll back" (eps* < d: d shrinks to eps* and the loop ends) or "stop" (eps* = d: d stays and
    the loop ends). The record's `rollback` flag is line 8's test eps* <= d, true for both endings."""
    if not ended:
        return "extend"
    return "roll back" if d_after < d_before else "stop"


@dataclass(frozen=True)
class RoundRecord:
    """Everything one round did. Times are seconds; `modeled_s` comes from the latency profile."""

    mode: str  # a name in `modes.MODES`
    round_index: int  # 0-based
    start_position: int  # committed sequence length (prompt included) before the round
    draft_tokens: tuple[int, ...]  # every token drafted this round (blocks_drafted * n)
    confidences: tuple[float, ...]  # q_i of each drafted token
    blocks_drafted: int
    policy_steps: tuple[PolicyStep, ...]  # Algorithm 1 iterations (LibraSpec only)
    eps_bounds: tuple[int, ...]  # eps_i over q_1..q_d at the chosen d
    chosen_length: int  # d (0: the drafter had nothing to offer and the round was an AR step); a tree's depth
    accepted: int  # a: accepted draft tokens (0..d); a tree's accepted path length
    committed_tokens: tuple[int, ...]  # tokens appended this round (a + 1, fewer at EOS / limit)
    bonus_token: int | None  # the target's correction / bonus token, None if cut by EOS / limit
    oracle_length: int | None  # d* of this round's state (oracle mode or annotation)
    draft_s: float
    policy_s: float
    verify_s: float
    modeled_s: float  # the latency profile's time for this round
    cumulative_tokens: int  # generated tokens so far, this round included
    cumulative_s: float  # measured seconds so far (draft + policy + verify)
    cumulative_modeled_s: float
    finished: bool = False  # True on the last round of a run (EOS or max_new_tokens)
    alpha: float | None = None  # LibraSpec's alpha this round (it changes under automatic alpha)
    draft_sources: tuple[str, ...] = ()  # the drafter that proposed each drafted token ("dflash", "lookup")
    tree_size: int = 0  # nodes of the draft tree verified besides the root (tree modes; 0 for chains)
    tree_tokens: tuple[int, ...] = ()  # the tree's nodes in best-first order, parents before children
    tree_parents: tuple[int, ...] = ()  # each node's parent index, -1 for children of the root
    tree_probs: tuple[float, ...] = ()  # each node's drafter confidence q_i(x)
    tree_path: tuple[int, ...] = ()  # indices of the accepted nodes, root to leaf
    tree_confidences: tuple[float, ...] = ()  # per drafted depth, the tree's q_i its depth policy saw
    oracle_tree_size: int | None = None  # nodes of the hindsight-best sub-tree (tree modes' d* is its depth)
    modeled_draft_s: float = 0.0  # the part of modeled_s that prices the round's drafting steps

    @property
    def tau(self) -> int:
        """Tokens committed this round (accepted drafts + bonus)."""
        return len(self.committed_tokens)

    @property
    def measured_s(self) -> float:
        return self.draft_s + self.policy_s + self.verify_s


# record fields holding one value per draft / step / token: lists in frames and Parquet, JSON in CSV
LIST_COLUMNS = (
    "draft_tokens",
    "confidences",
    "draft_sources",
    "eps_bounds",
    "committed_tokens",
    "tree_tokens",
    "tree_parents",
    "tree_probs",
    "tree_path",
    "tree_confidences",
    "policy_steps",
)


def committed_text(records: Iterable[RoundRecord]) -> list[int]:
    """The tokens a run committed, in order: its output after the prompt."""
    return [t for r in records for t in r.committed_tokens]


def records_to_frame(records: Iterable[RoundRecord]) -> pd.DataFrame:
    """One row per round; tuple fields stay as Python lists, policy steps as dicts."""
    rows = []
    for r in records:
        row = dataclasses.asdict(r)
        for key in LIST_COLUMNS[:-1]:
            row[key] = list(row[key])
        row["policy_steps"] = [dict(s) for s in row["policy_steps"]]
        row["tau"] = r.tau
        row["measured_s"] = r.measured_s
        rows.append(row)
    columns = [f.name for f in dataclasses.fields(RoundRecord)] + ["tau", "measured_s"]
    return pd.DataFrame(rows, columns=columns)


def frame_to_records(frame: pd.DataFrame) -> list[RoundRecord]:
    """Inverse of `records_to_frame` (also after `write_parquet` / `read_trace`): one record per row."""
    fields = dataclasses.fields(RoundRecord)
    out = []
    for row in frame.to_dict("records"):
        values = {}
        for f in fields:
            value = row[f.name]
            if f.name == "policy_steps":
                value = tuple(
                    PolicyStep(**{k: v.item() if hasattr(v, "item") else v for k, v in dict(step).items()})
                    for step in _as_list(value)
                )
            elif f.name in LIST_COLUMNS:
                value = tuple(_as_list(value))
            else:
                value = value.item() if hasattr(value, "item") else value
                if value is None or (isinstance(value, float) and math.isnan(value) and "None" in f.type):
                    value = None  # a column mixing numbers and None comes back as floats with NaN
                elif f.type.startswith("int") and isinstance(value, float):
                    value = int(value)
            values[f.name] = value
        out.append(RoundRecord(**values))
    return out


def _flat_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """List columns as JSON strings, so CSV round-trips them unambiguously."""
    flat = frame.copy()
    for key in LIST_COLUMNS:
        if key in flat:
            flat[key] = [json.dumps(v) for v in flat[key]]
    return flat


def write_csv(records: Sequence[RoundRecord] | pd.DataFrame, path: str) -> str:
    frame = records if isinstance(records, pd.DataFrame) else records_to_frame(records)
    atomic_write(path, lambda tmp: _flat_frame(frame).to_csv(tmp, index=False))
    return path


# round records are long lists of floats and token ids: zstd without dictionary pages keeps them
# about a third smaller than the default (snappy, dictionaries), and they read back the same
PARQUET_OPTIONS = dict(compression="zstd", compression_level=19, use_dictionary=False)


def write_parquet(records: Sequence[RoundRecord] | pd.DataFrame, path: str) -> str:
    frame = records if isinstance(records, pd.DataFrame) else records_to_frame(records)
    # list columns stay Parquet lists
    atomic_write(path, lambda tmp: frame.to_parquet(tmp, index=False, **PARQUET_OPTIONS))
    return path


def read_trace(path: str) -> pd.DataFrame:
    """Inverse of `write_csv` / `write_parquet` (also reads older traces with JSON-string lists)."""
    frame = pd.read_parquet(path) if path.endswith(".parquet") else pd.read_csv(path)
    for key in LIST_COLUMNS:
        if key in frame:
            frame[key] = [_as_list(v) for v in frame[key]]
    return frame


def _as_list(value) -> list:
    if isinstance(value, str):
        return json.loads(value)
    return [dict(v) if isinstance(v, dict) else v.item() if hasattr(v, "item") else v for v in value]


@dataclass(frozen=True)
class RunSummary:
    """Totals of one run. Speedups are over AR decoding of the same prompt and settings."""

    mode: str
    tokens: int
    rounds: int
    tau: float  # mean tokens committed per round
    seconds: float  # measured
    modeled_seconds: float
    tokens_per_s: float
    speedup_measured: float | None
    speedup_modeled: float | None
    mad_vs_oracle: float | None  # mean |d - d*| over rounds that carry d* (None: no round does)
    round_s: tuple[float, float, float] = (math.nan,) * 3  # measured seconds per round: quartiles 25/50/75


NOISE_Z = 2.0  # two measured totals closer than this many standard deviations of their noise are a tie


def timing_noise_s(records: Sequence[RoundRecord]) -> float:
    """Standard deviation of the records' measured total that timing noise alone explains.

    Per round, the measured time minus the latency profile's time for the same round leaves
    what the round's work (d, steps drafted) does not explain; the spread of these residuals
    over the rounds, times sqrt(rounds), is the noise of their sum. 0 with fewer than two rounds.
    """
    residuals = [r.measured_s - r.modeled_s for r in records]
    if len(residuals) < 2:
        return 0.0
    mean = sum(residuals) / len(residuals)
    variance = sum((x - mean) ** 2 for x in residuals) / (len(residuals) - 1)
    return math.sqrt(variance * len(residuals))


def interesting_rounds(records: Sequence[RoundRecord]) -> list[tuple[str, int]]:
    """(label, round index) of the rounds worth showing first, the first of each kind: the most
    Algorithm 1 iterations, an extend, a roll-back that follows an extend, the largest |d - d*|; a kind
    no round has is left out, and a round is named once (its first kind). Empty for no drafted round."""
    drafted = [r for r in records if r.chosen_length > 0]
    out, named = [], set()

    def name(label: str, record: RoundRecord | None) -> None:
        if record is not None and record.round_index not in named:
            named.add(record.round_index)
            out.append((f"{label}: round {record.round_index}", record.round_index))

    most = max(drafted, key=lambda r: len(r.policy_steps), default=None)
    if most is not None and len(most.policy_steps) > 1:
        name(f"most iterations ({len(most.policy_steps)})", most)
    extend = next((r for r in drafted if any(s.action == "extend" for s in r.policy_steps)), None)
    name("an extend", extend)
    back = next(
        (r for r in drafted if any(s.action == "roll back" for s in r.policy_steps[1:])), None
    )  # a roll-back after an iteration that extended: the loop's whole story in one round
    name("an extend, then a roll-back", back)
    gaps = [r for r in drafted if r.oracle_length is not None]
    widest = max(gaps, key=lambda r: abs(r.chosen_length - r.oracle_length), default=None)
    if widest is not None and widest.chosen_length != widest.oracle_length:
        name(f"largest |d - d*| (d = {widest.chosen_length}, d* = {widest.oracle_length})", widest)
    return out


def summarize(records: Sequence[RoundRecord], ar_records: Sequence[RoundRecord] | None = None) -> RunSummary:
    """Summary of one mode's records; speedups need the AR run of the same prompt."""
    if not records:
        raise ValueError("no records to summarize")
    tokens = sum(r.tau for r in records)
    seconds = sum(r.measured_s for r in records)
    modeled = sum(r.modeled_s for r in records)
    measured_speedup = modeled_speedup = None
    if ar_records:
        ar_tokens = sum(r.tau for r in ar_records)
        ar_s = sum(r.measured_s for r in ar_records) / ar_tokens
        ar_m = sum(r.modeled_s for r in ar_records) / ar_tokens
        measured_speedup = ar_s / (seconds / tokens) if seconds > 0 else None
        modeled_speedup = ar_m / (modeled / tokens) if modeled > 0 else None
    pairs = [(r.chosen_length, r.oracle_length) for r in records if r.oracle_length is not None]
    mad = sum(abs(d - o) for d, o in pairs) / len(pairs) if pairs else None  # the oracle's own: 0
    return RunSummary(
        mode=records[0].mode,
        tokens=tokens,
        rounds=len(records),
        tau=tokens / len(records),
        seconds=seconds,
        modeled_seconds=modeled,
        tokens_per_s=tokens / seconds if seconds > 0 else float("inf"),
        speedup_measured=measured_speedup,
        speedup_modeled=modeled_speedup,
        mad_vs_oracle=mad,
        round_s=tuple(float(x) for x in np.quantile([r.measured_s for r in records], (0.25, 0.5, 0.75))),
    )
