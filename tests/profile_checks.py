"""What every latency profile must satisfy: more verified rows or a longer context never cost less."""

import numpy as np

from libraspec.cost import AUTOREGRESSIVE, LatencyProfile


def physical(
    p: LatencyProfile,
    ks=range(1, 80),
    contexts=(0, 1, 16, 31, 32, 33, 60, 100, 128, 200, 256, 300, 600, 1024, 1500, 2048, 4000),
):
    """Every forward of the profile never costs less with more rows or a longer context: chains,
    trees and drafting, over the whole grid (beyond the tables too)."""
    for verify in (p.verify_time, p.tree_verify_time):
        grid = np.array([[verify(k, c) for k in ks] for c in contexts])  # (contexts, ks)
        assert np.all(np.diff(grid, axis=1) >= -1e-15), f"{verify.__name__} falls with k"
        assert np.all(np.diff(grid, axis=0) >= -1e-15), f"{verify.__name__} falls with the context"
        assert np.all(grid > 0)
    drafts = [p.draft_time(b) for b in range(0, 12)]
    assert all(b >= a for a, b in zip(drafts, drafts[1:]))
    if p.eagle_s > 0:  # a head round of d drafts: d passes, d + 1 rows; one more draft never costs less
        rounds = [p.round_time(d, AUTOREGRESSIVE) for d in ks]
        assert all(b > a for a, b in zip(rounds, rounds[1:]))
