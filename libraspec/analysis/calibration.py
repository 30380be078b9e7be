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

Binning: `BINS` equal-width bins of q, bin k = [k / bins, (k + 1) / bins) and q = 1 in the
last (`bin_edges`, `bin_index`). This is the one implementation of the binning, the ECE,
the reliability table and acceptance by position: the app's calibration tab, the drafter
evaluation (`train.evaluate`) and the measured report (`report_md`) all call it.

Reads records only (RoundRecord fields or `records.records_to_frame` columns), never
engine internals.
"""

from __future__ import annotations

from typing import Iterable, Iterator, Sequence

import numpy as np
import pandas as pd

from libraspec.modes import MODES
from libraspec.records import RoundRecord

SAMPLE_COLUMNS = ["mode", "round_index", "position", "q", "accepted"]
# AR drafts nothing; the oracle picks d knowing the outcome
EXCLUDED_MODES = tuple(name for name, mode in MODES.items() if mode.kind != "policy")
BINS = 10  # equal-width bins of q in every reliability table and ECE of the project


def _rounds(records: Iterable[RoundRecord] | pd.DataFrame) -> Iterator[tuple]:
    """(mode, round_index, confidences, chosen_length d, accepted a) of each round."""
    if isinstance(records, pd.DataFrame):
        if records.empty:
            return
        yield from records[["mode", "round_index", "confidences", "chosen_length", "accepted"]].itertuples(
            index=False, name=None
        )
    else:
        for r in records:
            yield r.mode, r.round_index, r.confidences, r.chosen_length, r.accepted


def acceptance_samples(
    records: Iterable[RoundRecord] | pd.DataFrame, modes: Sequence[str] | None = None, tested_only: bool = False
) -> pd.DataFrame:
    """One row per submitted draft: (mode, round_index, position i, q_i, accepted_i in {0, 1}).

    `records` are round records or their `records.records_to_frame` table. `modes` defaults
    to every mode except AR (no drafts) and the oracle, whose d* is chosen from the realised
    acceptance and would bias the sample. Rounds with d = 0 contribute nothing.
    """

    def wanted(mode: str) -> bool:
        return mode in modes if modes is not None else mode not in EXCLUDED_MODES

    rows = []
    for mode, round_index, q, d, a in _rounds(records):
        if not wanted(mode):
            continue
        d, a = int(d), int(a)
        if d > len(q):
            raise ValueError(f"round {round_index} ({mode}) submits d = {d} drafts but records {len(q)} confidences")
        last = min(d, a + 1) if tested_only else d
        rows += [(mode, int(round_index), i, float(q[i - 1]), int(i <= a)) for i in range(1, last + 1)]
    return pd.DataFrame(rows, columns=SAMPLE_COLUMNS)


def _check_bins(bins) -> int:
    if isinstance(bins, bool) or not isinstance(bins, (int, np.integer)) or bins < 1:
        raise ValueError(f"bins must be an integer >= 1, got {bins!r}")
    return int(bins)


def bin_edges(bins: int = BINS) -> np.ndarray:
    """The edges 0, 1 / bins, ..., 1 of `bins` equal-width bins of q. Shape (bins + 1,)."""
    bins = _check_bins(bins)
    return np.arange(bins + 1) / bins  # (bins + 1,)


def bin_index(q, bins: int = BINS) -> np.ndarray:
    """The bin k of each q in [0, 1]: edges[k] <= q < edges[k + 1]; q = 1 joins the last bin.

    q (N,) -> (N,) integers in 0..bins - 1, consistent with `bin_edges` (the table's lo / hi).
    """
    edges = bin_edges(bins)
    return np.minimum(np.searchsorted(edges, np.asarray(q, dtype=np.float64), side="right") - 1, len(edges) - 2)  # (N,)


def _check(q, accepted, bins: int) -> tuple[np.ndarray, np.ndarray]:
    _check_bins(bins)
    q = np.asarray(q, dtype=np.float64).reshape(-1)  # (N,)
    accepted = np.asarray(accepted, dtype=np.float64).reshape(-1)  # (N,)
    if q.shape != accepted.shape:
        raise ValueError(f"q and accepted differ in length: {q.size} vs {accepted.size}")
    if q.size and (not np.all(np.isfinite(q)) or q.min() < 0 or q.max() > 1):
        raise ValueError("confidences q must be finite and within [0, 1]")
    if q.size and not np.all((accepted == 0) | (accepted == 1)):
        raise ValueError("accepted must hold 0 or 1 for every sample")
    return q, accepted


def reliability_table(q, accepted, bins: int = BINS) -> pd.DataFrame:
    """Per bin k: edges lo = edges[k] and hi = edges[k + 1], sample count, mean confidence q and
    acceptance rate (NaN when the bin is empty). One row per bin, `bins` rows."""
    q, accepted = _check(q, accepted, bins)
    edges = bin_edges(bins)
    index = bin_index(q, bins)
    count = np.bincount(index, minlength=bins)  # (bins,)
    with np.errstate(invalid="ignore", divide="ignore"):
        confidence = np.bincount(index, weights=q, minlength=bins) / count  # (bins,), NaN where empty
        acceptance = np.bincount(index, weights=accepted, minlength=bins) / count  # (bins,)
    return pd.DataFrame(
        {
            "lo": edges[:-1],
            "hi": edges[1:],
            "count": count.astype(int),
            "confidence": confidence,
            "acceptance": acceptance,
        }
    )


def expected_calibration_error(q, accepted, bins: int = BINS) -> float:
    """ECE = sum_k (N_k / N) * |acc_k - conf_k| over the bins of `reliability_table`.

    Bin k holds the samples with k / bins <= q < (k + 1) / bins (q = 1 in the last bin);
    N_k is its sample count, N the total, conf_k the mean q and acc_k the mean accepted
    (0/1) of its samples. Empty bins weigh nothing. 0 means perfectly calibrated; NaN for
    no samples.
    """
    table = reliability_table(q, accepted, bins)
    filled = table[table["count"] > 0]
    if filled.empty:
        return float("nan")
    gaps = (filled["acceptance"] - filled["confidence"]).abs()
    return float((filled["count"] * gaps).sum() / filled["count"].sum())


def acceptance_by_position(samples: pd.DataFrame) -> pd.DataFrame:
    """Per draft position i: samples, acceptance rate and mean q_i (rows for observed positions)."""
    if samples.empty:
        return pd.DataFrame(columns=["position", "count", "acceptance", "confidence"])
    grouped = samples.groupby("position", sort=True)
    return pd.DataFrame(
        {
            "position": grouped.size().index.astype(int),
            "count": grouped.size().to_numpy(),
            "acceptance": grouped["accepted"].mean().to_numpy(dtype=float),
            "confidence": grouped["q"].mean().to_numpy(dtype=float),
        }
    )
