"""What the Calibration tab says of a set of round records: the drafter's reliability (ECE, the
reliability and per-position tables, the figure; `libraspec.analysis.calibration`), the latency
fit and section 3.4's alpha, and draft-tree nodes by depth (`libraspec.analysis.tree_calibration`).
`calibration_tab` lays it out. Paper symbols: q_i, d, tau, c, alpha.
"""

from __future__ import annotations

import math
from collections import Counter

from libraspec.analysis.calibration import (
    EXCLUDED_MODES,
    acceptance_by_position,
    acceptance_samples,
    expected_calibration_error,
    reliability_table,
)
from libraspec.analysis.tree_calibration import by_depth, node_samples
from libraspec.records import RoundRecord
from libraspec.views import tuning_plots

from .race_words import alpha_advice
from .settings import suggest_alpha


def summarize_calibration(records: list[RoundRecord], tested_only: bool, profile) -> tuple[str, object]:
    """(markdown summary, calibration figure) for a set of round records."""
    samples = acceptance_samples(records, tested_only=tested_only)
    table = reliability_table(samples["q"], samples["accepted"])
    ece = expected_calibration_error(samples["q"], samples["accepted"])
    figure = tuning_plots.calibration_figure(table, acceptance_by_position(samples), ece)
    if samples.empty:
        return "No submitted drafts yet: run a race, or a fresh run on the example prompts.", figure
    # the rounds the samples come from: round indices repeat across prompts and races, so count records
    sampled = [r for r in records if r.mode not in EXCLUDED_MODES and r.chosen_length > 0]
    sources = Counter(s for r in sampled for s in r.draft_sources[: r.chosen_length])
    by_source = f", drafts by source: {', '.join(f'{k} {v}' for k, v in sorted(sources.items()))}" if sources else ""
    lines = [
        f"**{len(samples)} submitted drafts** from {len(sampled)} rounds "
        f"({', '.join(sorted(set(samples['mode'])))}){by_source}; mean q_i = {samples['q'].mean():.3f}, "
        f"acceptance = {samples['accepted'].mean():.3f}, **ECE = {ece:.3f}** "
        "(10 equal-width bins of q, weighted by count)."
    ]
    if profile is not None:
        t0, c = profile.linear_fit()
        line = (
            f"Latency fit on this machine: T_verify(k) = {1000 * t0:.2f} + {1000 * c:.3f} k ms "
            f"(c = cost per verified position). "
        )
        try:
            line += (
                f"Section 3.4 gives {alpha_advice(suggest_alpha(sampled, profile))}: its formula for these rounds, "
                "not the app's recommendation, which replays your races (What-if)."
            )
        except ValueError as error:
            line += f"No alpha from section 3.4's formula: {error}."
        lines.append(line)
    return "\n\n".join(lines), figure


def tree_calibration(records: list[RoundRecord]) -> tuple[str, object]:
    """(markdown, table) of draft-tree nodes: path probability P against the accepted path, by depth."""
    samples = node_samples(records)
    if samples.empty:
        return "No draft-tree rounds yet: race a tree mode (ddtree, ddtree-marginal, ddtree-priced, ...).", None
    text = (
        f"**Draft-tree nodes: {len(samples)}** verified in {sum(1 for r in records if r.tree_size)} "
        f"tree rounds ({', '.join(sorted(set(samples['mode'])))}). A node's path probability P (the product of "
        "q along its root path) is what ddtree-marginal and ddtree-priced read as its chance of lying on the "
        "accepted path. A correction P^gamma fitted on held-apart prompts, and what it would change: "
        "benchmarks/results/tree_calibration/."
    )
    return text, by_depth(samples).round(3)


def calibration_json(records: list[RoundRecord], tested_only: bool) -> dict:
    """The `calibration` API's answer for `records`: ECE, reliability bins, acceptance by position,
    and for draft-tree nodes their path probability against the accepted path by depth."""
    samples = acceptance_samples(records, tested_only=tested_only)
    ece = expected_calibration_error(samples["q"], samples["accepted"])
    nodes = node_samples(records)
    return {
        "samples": len(samples),
        "ece": ece if math.isfinite(ece) else None,
        "bins": _rows(reliability_table(samples["q"], samples["accepted"])),
        "positions": _rows(acceptance_by_position(samples)),
        "tree_nodes": len(nodes),
        "tree_by_depth": _rows(by_depth(nodes)),
    }


def _rows(frame) -> list[dict]:
    """JSON-ready rows: NaN becomes None."""
    return frame.astype(object).where(frame.notna(), None).to_dict(orient="records")
