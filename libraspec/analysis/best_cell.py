"""Which cell of a tuning grid leads: `best_cell`, the rule the sweep's heatmaps outline a cell by.

A cell is crowned only when it is ahead of every other beyond what the data can tell apart: its
measured speedup ahead of each other cell's by more than their combined timing noise
(records.NOISE_Z standard deviations), and never
when another cell made the same decisions (their times differ by noise alone); a metric computed
from the decisions alone must be strictly ahead.
"""

from __future__ import annotations

import math

import pandas as pd

from ..records import NOISE_Z


def best_cell(frame: pd.DataFrame, metric: str) -> int | None:
    """Row position of the best cell for `metric` (lowest for mad_vs_oracle, else highest), or None
    when no cell is ahead of all others: a measured speedup must lead every other cell by more than
    NOISE_Z standard deviations of the two cells' timing noise (`noise_s`), and share its decisions
    with no other cell (identical decisions differ in measured time by noise alone, however small
    the noise estimate); any other metric, computed from the decisions alone, must be strictly
    ahead (cells with identical decisions tie)."""
    values = (
        pd.to_numeric(frame[metric], errors="coerce").reset_index(drop=True)
        if metric in frame
        else pd.Series(dtype=float)
    )
    values = values[values.notna()]
    if values.empty:
        return None
    order = values.sort_values(ascending=metric == "mad_vs_oracle", kind="stable")
    best = int(order.index[0])
    if len(order) == 1:
        return best
    if metric == "speedup_measured":
        if "noise_s" not in frame or "wall_s" not in frame:
            return None  # no noise known: no winner claimed
        if "decisions" in frame:
            decisions = frame["decisions"].reset_index(drop=True)
            if (decisions == decisions[best]).sum() > 1:
                return None  # one tie with the cells that decided the same
        noise = frame["noise_s"].reset_index(drop=True).astype(float) / frame["wall_s"].reset_index(drop=True)
        # every other cell, not only the runner-up: "within noise" is not transitive, and a slower
        # cell with a wide noise can reach the best while the runner-up does not
        clear = all(
            values[best] - values[other]
            > NOISE_Z * math.hypot(values[best] * noise[best], values[other] * noise[other])
            for other in order.index[1:]
        )
        return best if clear else None
    gap = abs(float(order.iloc[0]) - float(order.iloc[1]))
    return best if gap > 1e-9 * max(1.0, abs(float(order.iloc[0]))) else None
