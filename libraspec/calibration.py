"""How well drafter confidences q_i predict acceptance: reliability, ECE, acceptance by position.

LibraSpec uses the drafter confidence q_i as a stand-in for p_i, the probability that
the target accepts draft i (Assumption 3.7), and the paper notes that this calibration
degrades along the draft, which is why d is capped at d_max (section 3.4). This module
measures it from round records: every submitted draft i <= d of a round is one sample
(q_i, accepted_i) with accepted_i = 1 iff i <= a, the round's accepted prefix length.

Two sample sets:
- all submitted positions (default): accepted_i is prefix acceptance, what tau counts;
- `tested_only=True`: positions i <= a + 1 only, the drafts the target actually judged
  after accepting every earlier one, so the acceptance rate estimates the conditional
  p_i that q_i stands in for.

Reads records only (`records.records_to_frame` columns), never engine internals.
"""
from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from libraspec.modes import MODES
from libraspec.records import RoundRecord, records_to_frame

SAMPLE_COLUMNS = ["mode", "round_index", "position", "q", "accepted"]
# AR drafts nothing; the oracle picks d knowing the outcome
EXCLUDED_MODES = tuple(name for name, mode in MODES.items() if mode.kind != "policy")


def _frame(records: Iterable[RoundRecord] | pd.DataFrame) -> pd.DataFrame:
    return records if isinstance(records, pd.DataFrame) else records_to_frame(list(records))


def acceptance_samples(records: Iterable[RoundRecord] | pd.DataFrame, modes: Sequence[str] | None = None,
                       tested_only: bool = False) -> pd.DataFrame:
    """One row per submitted draft: (mode, round_index, position i, q_i, accepted_i in {0, 1}).

    `modes` defaults to every mode except AR (no drafts) and the oracle, whose d* is
    chosen from the realised acceptance and would bias the sample. Rounds with d = 0
    contribute nothing.
    """
    frame = _frame(records)
    if frame.empty:
        return pd.DataFrame(columns=SAMPLE_COLUMNS)
    wanted = frame["mode"].isin(modes) if modes is not None else ~frame["mode"].isin(EXCLUDED_MODES)
    rows = []
    for mode, round_index, q, d, a in frame.loc[wanted, ["mode", "round_index", "confidences",
                                                         "chosen_length", "accepted"]].itertuples(index=False):
        d, a = int(d), int(a)
        if d > len(q):
            raise ValueError(f"round {round_index} ({mode}) submits d = {d} drafts but records {len(q)} confidences")
        last = min(d, a + 1) if tested_only else d
        rows += [(mode, int(round_index), i, float(q[i - 1]), int(i <= a)) for i in range(1, last + 1)]
    return pd.DataFrame(rows, columns=SAMPLE_COLUMNS)


def _bin_index(q: np.ndarray, bins: int) -> np.ndarray:
    """Equal-width bins [k/bins, (k+1)/bins); q = 1 joins the last bin."""
    return np.minimum((q * bins).astype(np.int64), bins - 1)


def _check(q, accepted, bins: int) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(bins, bool) or not isinstance(bins, (int, np.integer)) or bins < 1:
        raise ValueError(f"bins must be an integer >= 1, got {bins!r}")
    q = np.asarray(q, dtype=np.float64).reshape(-1)
    accepted = np.asarray(accepted, dtype=np.float64).reshape(-1)
    if q.shape != accepted.shape:
        raise ValueError(f"q and accepted differ in length: {q.size} vs {accepted.size}")
    if q.size and (not np.all(np.isfinite(q)) or q.min() < 0 or q.max() > 1):
        raise ValueError("confidences q must be finite and within [0, 1]")
    if q.size and not np.all((accepted == 0) | (accepted == 1)):
        raise ValueError("accepted must hold 0 or 1 for every sample")
    return q, accepted


def expected_calibration_error(q, accepted, bins: int = 10) -> float:
    """ECE = sum_k (N_k / N) * |acc_k - conf_k| over `bins` equal-width bins of q.

    Bin k holds the samples with k / bins <= q < (k + 1) / bins (q = 1 in the last bin);
    N_k is its sample count, N the total, conf_k the mean q and acc_k the mean accepted
    (0/1) of its samples. Empty bins weigh nothing. 0 means perfectly calibrated; NaN for
    no samples.
    """
    q, accepted = _check(q, accepted, bins)
    if q.size == 0:
        return float("nan")
    index = _bin_index(q, bins)
    total = 0.0
    for k in np.unique(index):
        members = index == k
        total += members.sum() / q.size * abs(accepted[members].mean() - q[members].mean())
    return float(total)


def reliability_table(q, accepted, bins: int = 10) -> pd.DataFrame:
    """Per bin: lower and upper edge, count, mean confidence, acceptance rate (NaN when empty)."""
    q, accepted = _check(q, accepted, bins)
    index = _bin_index(q, bins)
    rows = []
    for k in range(bins):
        members = index == k
        count = int(members.sum())
        rows.append((k / bins, (k + 1) / bins, count,
                     float(q[members].mean()) if count else float("nan"),
                     float(accepted[members].mean()) if count else float("nan")))
    return pd.DataFrame(rows, columns=["lo", "hi", "count", "confidence", "acceptance"])


def acceptance_by_position(samples: pd.DataFrame) -> pd.DataFrame:
    """Per draft position i: samples, acceptance rate and mean q_i (rows for observed positions)."""
    if samples.empty:
        return pd.DataFrame(columns=["position", "count", "acceptance", "confidence"])
    grouped = samples.groupby("position", sort=True)
    return pd.DataFrame({"position": grouped.size().index.astype(int), "count": grouped.size().to_numpy(),
                         "acceptance": grouped["accepted"].mean().to_numpy(dtype=float),
                         "confidence": grouped["q"].mean().to_numpy(dtype=float)})
