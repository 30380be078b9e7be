"""How well a draft tree's path probabilities predict which nodes lie on the accepted path.

ddtree-marginal and ddtree-priced (docs/ARCHITECTURE.md, "Trees that choose their nodes") add a node
while its path probability P = prod q_k along its root path pays: they read P as the chance that
the node is accepted. This module measures that from tree rounds' records: every verified node is
one sample (depth h, P, on_path), on_path = 1 iff the node lies on the round's accepted path
(`RoundRecord.tree_path`: greedy, the one path the target's tokens follow; sampling, the path the
recursive rejection walked). Reliability and ECE per depth use `calibration`'s bins.

A power correction P -> P^gamma, fitted by log loss, is the one correction offered: it is monotone
in P, so the best-first order of a tree (and the prefix rule of the policies) is unchanged, and
gamma < 1 raises under-confident probabilities, gamma > 1 lowers over-confident ones.

Reads records only (RoundRecord fields or `records.records_to_frame` columns).
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from ..records import RoundRecord
from ..tree import path_probabilities
from .calibration import BINS, expected_calibration_error

SAMPLE_COLUMNS = ["mode", "round_index", "node", "depth", "path_prob", "on_path"]
GAMMAS = np.geomspace(0.1, 10.0, 401)  # the grid `fit_power` searches


def _trees(records: Iterable[RoundRecord] | pd.DataFrame):
    """(mode, round_index, parents, probs, path) of every round that verified a tree."""
    if isinstance(records, pd.DataFrame):
        if records.empty or "tree_parents" not in records:
            return
        columns = ["mode", "round_index", "tree_parents", "tree_probs", "tree_path"]
        rows = records[columns].itertuples(index=False, name=None)
    else:
        rows = ((r.mode, r.round_index, r.tree_parents, r.tree_probs, r.tree_path) for r in records)
    for mode, round_index, parents, probs, path in rows:
        if parents is not None and len(parents):
            yield mode, int(round_index), list(parents), list(probs), set(int(j) for j in path)


def node_samples(records: Iterable[RoundRecord] | pd.DataFrame, modes: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per verified tree node: (mode, round_index, node, depth h, path probability P, on_path)."""
    rows = []
    for mode, round_index, parents, probs, path in _trees(records):
        if modes is not None and mode not in modes:
            continue
        depth = [0] * len(parents)
        for j, (parent, p) in enumerate(zip(parents, path_probabilities(parents, probs))):
            depth[j] = 1 + (depth[int(parent)] if parent >= 0 else 0)  # parents come before their children
            rows.append((mode, round_index, j, depth[j], p, int(j in path)))
    return pd.DataFrame(rows, columns=SAMPLE_COLUMNS)


def _check_gamma(gamma) -> float:
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float, np.floating)) or not 0 < gamma < np.inf:
        raise ValueError(f"gamma must be a finite number > 0, got {gamma!r}")
    return float(gamma)


def corrected(path_prob, gamma: float = 1.0) -> np.ndarray:
    """P^gamma, clipped to [0, 1]."""
    return np.clip(np.asarray(path_prob, dtype=np.float64), 0.0, 1.0) ** _check_gamma(gamma)


def log_loss(p, y) -> float:
    """Mean negative log likelihood of 0/1 outcomes y under probabilities p (clipped to 1e-9 .. 1 - 1e-9)."""
    p = np.clip(np.asarray(p, dtype=np.float64), 1e-9, 1 - 1e-9)
    y = np.asarray(y, dtype=np.float64)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log1p(-p))) if y.size else float("nan")


def fit_power(samples: pd.DataFrame) -> float:
    """The gamma of `GAMMAS` whose P^gamma has the least log loss on `samples` (1.0 without samples)."""
    if samples.empty:
        return 1.0
    p, y = samples["path_prob"].to_numpy(), samples["on_path"].to_numpy()
    losses = [log_loss(corrected(p, g), y) for g in GAMMAS]
    return float(GAMMAS[int(np.argmin(losses))])


def by_depth(samples: pd.DataFrame, gamma: float = 1.0, bins: int = BINS, deepest: int = 8) -> pd.DataFrame:
    """Per depth h = 1..deepest (deeper nodes pooled in the last row, labelled "deepest+") and over
    all nodes: node count, mean P^gamma, the share on the accepted path and the ECE."""
    columns = ["depth", "nodes", "mean_p", "on_path", "ece"]
    if samples.empty:
        return pd.DataFrame(columns=columns)
    p = corrected(samples["path_prob"], gamma)
    y = samples["on_path"].to_numpy(dtype=np.float64)
    depth = np.minimum(samples["depth"].to_numpy(), deepest)
    rows = []
    for h in sorted(set(depth.tolist())):
        mine = depth == h
        label = f"{h}+" if h == deepest and (samples["depth"].to_numpy() > deepest).any() else str(h)
        ece = expected_calibration_error(p[mine], y[mine], bins)
        rows.append((label, int(mine.sum()), float(p[mine].mean()), float(y[mine].mean()), ece))
    rows.append(("all", len(p), float(p.mean()), float(y.mean()), expected_calibration_error(p, y, bins)))
    return pd.DataFrame(rows, columns=columns)
