"""Plotly figures of the what-if view (`analysis.whatif`): d per round of LibraSpec, static d, the
chosen rule, the per-round oracle and the best schedule in hindsight, and LibraSpec's alpha x d_max grid. Every
title says that the figure is a modeled replay and which latency profile priced it."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from libraspec.modes import BASELINE, ORACLE, PAPER
from libraspec.views.plots import apply_layout, mode_color

BEST_COLOR = "#000000"


def lengths_figure(plan) -> go.Figure:
    """d of each round against the output position the round started at (step lines), one line per
    way through the text; the legend carries each one's modeled speedup over AR."""
    fig = go.Figure()
    colours = {
        plan.libraspec.label: mode_color(PAPER),
        plan.static.label: mode_color(BASELINE),
        plan.oracle.label: mode_color(ORACLE),
        plan.best.label: BEST_COLOR,
    }
    if plan.rule is not None:
        colours[plan.rule.label] = mode_color(plan.rule_mode)
    for line in plan.lines:
        dotted = line is plan.oracle
        fig.add_trace(
            go.Scatter(
                x=list(line.starts),
                y=list(line.lengths),
                name=f"{line.label}: {line.speedup(plan.ar_seconds):.2f}x",
                mode="markers" if dotted else "lines",
                line=dict(color=colours[line.label], shape="hv", width=3 if line is plan.best else 2),
                marker=dict(color=colours[line.label], size=5, symbol="circle-open"),
                hovertemplate="position %{x}<br>d = %{y}<extra>" + line.label + "</extra>",
            )
        )
    top = max((max(line.lengths, default=0) for line in plan.lines), default=0)
    fig.update_yaxes(rangemode="tozero", dtick=max(1, -(-top // 8)))  # whole numbers: d counts drafts
    return apply_layout(
        fig,
        "whatif",
        f"Modeled replay, not a measurement: d per round ({plan.profile})",
        xaxis_title="output position at the round's start (tokens)",
        yaxis_title="d (drafts verified)",
    )


def column_labels(speedups: np.ndarray, d_maxes) -> list[str]:
    """Each d_max column's label; a column equal to a smaller d_max's in every row (d_max never bound
    there) is named after it, "32 (= 24)", so identical columns are not read as separate findings."""
    labels = []
    for j, d in enumerate(d_maxes):
        same = next((k for k in range(j) if np.array_equal(speedups[:, k], speedups[:, j])), None)
        labels.append(f"{d}" if same is None else f"{d} (= {d_maxes[same]})")
    return labels


def grid_figure(speedups: np.ndarray, alphas, d_maxes, best_speedup: float, profile: str, chosen=None) -> go.Figure:
    """LibraSpec's modeled speedup per (alpha, d_max) cell as a share of the best schedule's; the
    cell the sliders chose is outlined."""
    share = speedups / best_speedup
    text = [[f"{s:.2f}x" for s in row] for row in speedups]
    fig = go.Figure(
        go.Heatmap(
            z=share,
            x=column_labels(speedups, d_maxes),
            y=[f"{a:g}" for a in alphas],
            text=text,
            texttemplate="%{text}",
            colorscale="Viridis",
            zmin=float(np.nanmin(share)) if np.isfinite(share).any() else 0.0,
            zmax=1.0,
            colorbar=dict(title=dict(text="share of best", side="right")),
            hovertemplate="alpha %{y}, d_max %{x}<br>%{text} (%{z:.1%} of the best schedule)<extra></extra>",
        )
    )
    if chosen is not None and chosen[0] in alphas and chosen[1] in d_maxes:
        i, j = list(alphas).index(chosen[0]), list(d_maxes).index(chosen[1])
        fig.add_shape(type="rect", x0=j - 0.5, x1=j + 0.5, y0=i - 0.5, y1=i + 0.5, line=dict(color="#D55E00", width=3))
    return apply_layout(
        fig,
        "whatif_grid",
        f"Modeled replay: LibraSpec's speedup over AR per alpha x d_max ({profile})",
        xaxis_title="d_max",
        yaxis_title="alpha",
    )
