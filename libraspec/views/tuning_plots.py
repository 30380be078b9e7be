"""Plotly figures of the teaching and tuning views: Algorithm 1 step-through, expected
speedup, the alpha x d_max sweep and drafter calibration.

They share `plots`' colours, heights and layout so every tab looks alike. Symbols follow
the LibraSpec paper: d, d_max, alpha, B (draft budget), n (block size), eps_i (Algorithm 1
line 6), eps* (their minimum), q_i (drafter confidence), E[eta_d] (Eq. 1), tau.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from libraspec.cost import BLOCK_DIFFUSION, Drafting
from libraspec.modes import BASELINE, ORACLE, PAPER
from libraspec.policy import worked_bounds
from libraspec.views.plots import MIN_LENGTH_AXIS, MODE_COLORS, apply_layout, ar_line, empty_figure

SWEEP_METRICS = (
    ("speedup_modeled", "modeled speedup (x)"),
    ("speedup_measured", "measured speedup (x), decoded cells"),
    ("tau", "tau (tokens per round)"),
    ("mad_vs_oracle", "mean |d - d*|"),
)


def stepper_figure(states: list, index: int, q, d_max: int, alpha: float | None = None) -> go.Figure:
    """One state of the Algorithm 1 step-through (`libraspec.analysis.stepper.algorithm_states`).

    Bars: the bounds eps_i the iteration compared (line 6), each with its value, the argmin
    outlined, and with `alpha` its worked line on hover ("eps_7 = floor(2.2 * 0.939 + 7) = 9"); dashed:
    eps*; solid: the d it was compared with; dotted vertical: the resulting d and d_max;
    shaded: the positions drafted so far (blocks x n); q_i on the right axis. Axis ranges
    are fixed over all states so stepping does not rescale the picture.
    """
    if not 0 <= index < len(states):
        raise ValueError(f"step index {index} outside 0..{len(states) - 1}")
    state = states[index]
    q = [float(v) for v in q]
    compared = state.step.d_before if state.step is not None else state.d
    drafted = state.drafted
    right = max(d_max, drafted, 1)
    top = max([max(s.eps) for s in states] + [d_max]) * 1.12 + 1
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_vrect(x0=0.5, x1=drafted + 0.5, fillcolor="#56B4E9", opacity=0.15, line_width=0)
    positions = list(range(1, len(state.eps) + 1))
    fig.add_trace(
        go.Bar(
            x=positions,
            y=list(state.eps),
            name="eps_i",
            marker_color=MODE_COLORS[PAPER],
            opacity=0.75,
            marker_line=dict(width=[3 if i == state.argmin else 0 for i in positions], color="#000000"),
            text=list(state.eps),
            textposition="outside",
            customdata=(
                worked_bounds(q[: len(state.eps)], alpha)
                if alpha is not None and len(q) >= len(state.eps)
                else [f"eps_{i} = {e}" for i, e in zip(positions, state.eps)]
            ),
            hovertemplate="%{customdata}<extra></extra>",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=[0.5, len(state.eps) + 0.5],
            y=[state.eps_star] * 2,
            mode="lines",
            name=f"eps* = {state.eps_star}",
            line=dict(color="#000000", dash="dash", width=1.5),
        )
    )
    fig.add_trace(
        go.Scatter(
            x=[0.5, right + 0.5],
            y=[compared] * 2,
            mode="lines",
            name=f"d compared = {compared}",
            line=dict(color="#444444", width=2),
        )
    )
    fig.add_trace(
        go.Scatter(
            x=list(range(1, min(len(q), right) + 1)),
            y=q[:right],
            name="q_i",
            mode="lines+markers",
            line=dict(color="#56B4E9", width=1.5),
            marker=dict(size=4),
            hovertemplate="i = %{x}<br>q_i = %{y:.3f}<extra></extra>",
        ),
        secondary_y=True,
    )
    fig.add_vline(
        x=state.d + 0.5,
        line=dict(color=MODE_COLORS[ORACLE], width=2, dash="dot"),
        annotation_text=f"d = {state.d}",
        annotation_position="top right",
    )
    fig.add_vline(
        x=d_max + 0.5,
        line=dict(color="#999999", width=1, dash="dot"),
        annotation_text=f"d_max = {d_max}",
        annotation_position="top left",
    )
    fig.update_xaxes(title_text="draft position i (shaded: drafted)", range=[0.5, right + 0.5])
    fig.update_yaxes(title_text="eps_i", range=[0, top], secondary_y=False)
    fig.update_yaxes(title_text="q_i", range=[0, 1.05], showgrid=False, secondary_y=True)
    label = "start" if state.index == 0 else f"iteration {state.index}"
    step = f"Step {index}/{len(states) - 1} ({label})" if len(states) > 1 else "The only state (the loop never runs)"
    return apply_layout(
        fig,
        "stepper",
        f"{step}: d = {state.d}, B = {state.budget}, blocks drafted = {state.blocks}",
        barmode="overlay",
    )


def message_figure(kind: str, title: str, message: str) -> go.Figure:
    """A figure of `kind` that holds only a message (what was refused, what to do), axes hidden."""
    fig = empty_figure(go.Figure(), message)
    return apply_layout(fig, kind, title, xaxis=dict(visible=False), yaxis=dict(visible=False))


def expected_speedup_figure(
    q, profile: Any, d_max: int, libraspec_d: int, static_length: int, drafting: Drafting = BLOCK_DIFFUSION
) -> go.Figure:
    """E[eta_d] for d = 1..d_max with q_i standing in for p_i (Eq. 1, `theory.expected_speedup_curve`).

    Marks LibraSpec's d, the exhaustive argmax over 1..d_max and the static length. When
    the objective is unimodal (Theorems 3.5-3.6) single beneficial adjustments reach the
    argmax; a concave measured profile or per-block drafting steps can break that. `drafting` says
    how the rounds draft (block diffusion by default).
    """
    from libraspec.analysis.theory import exhaustive_argmax, expected_speedup_curve

    curve = expected_speedup_curve(q, profile, d_max, drafting)  # (d_max,)
    best = exhaustive_argmax(q, profile, d_max, drafting)
    fig = go.Figure(
        go.Scatter(
            x=list(range(1, d_max + 1)),
            y=curve.tolist(),
            name="E[eta_d]",
            mode="lines",
            line=dict(color="#444444", width=2),
            hovertemplate="d = %{x}<br>E[eta_d] = %{y:.3f}x<extra></extra>",
        )
    )
    marks = (
        (f"LibraSpec d = {libraspec_d}", libraspec_d, MODE_COLORS[PAPER], "circle", 13),
        (f"argmax d = {best}", best, MODE_COLORS[ORACLE], "diamond-open", 17),
        (f"static d = {static_length}", static_length, MODE_COLORS[BASELINE], "square", 10),
    )
    for name, d, color, symbol, size in marks:
        if 1 <= d <= d_max:
            fig.add_trace(
                go.Scatter(
                    x=[d],
                    y=[float(curve[d - 1])],
                    name=name,
                    mode="markers",
                    marker=dict(color=color, symbol=symbol, size=size, line=dict(width=2)),
                    hovertemplate=f"{name}<br>E[eta_d] = %{{y:.3f}}x<extra></extra>",
                )
            )
    ar_line(fig)
    return apply_layout(
        fig,
        "expected",
        "Expected speedup E[eta_d] with q_i as p_i (Eq. 1)",
        xaxis=dict(title="speculative length d", range=[0.5, d_max + 0.5]),
        yaxis=dict(title="E[eta_d] (x)", range=[0, max(float(curve.max()), 1.0) * 1.15]),
    )


def _colorbar_beside(fig: go.Figure, row: int, col: int, title: str) -> dict:
    """A colour bar just right of subplot (row, col), as tall as it: each heatmap of a grid its own."""
    axes = fig.get_subplot(row, col)
    (_, x1), (y0, y1) = axes.xaxis.domain, axes.yaxis.domain
    return dict(
        x=x1 + 0.01, y=(y0 + y1) / 2, len=y1 - y0, thickness=10, title=dict(text=title.split(" (")[0], side="right")
    )


def sweep_figure(frame: pd.DataFrame, alphas: list[str] | None = None, d_maxes: list[int] | None = None) -> go.Figure:
    """Heatmaps over the alpha x d_max grid (`libraspec.experiments.sweep` rows), best cell outlined in each.

    Best: highest modeled / measured speedup and tau, lowest mean |d - d*|, outlined only where
    `analysis.best_cell` finds a cell ahead of all others (the title names the metrics where none is). `alphas` and
    `d_maxes` fix the axes while a sweep is still filling the grid. Rows of other modes (the rules a
    greedy sweep replays beside the grid, `mode` not PAPER) are no cells: neither drawn nor crowned.
    """
    if "mode" in frame:
        frame = frame[frame["mode"] == PAPER].reset_index(drop=True)
    alphas = [str(a) for a in (alphas or list(dict.fromkeys(frame["alpha"])) if "alpha" in frame else [])]
    d_maxes = [int(d) for d in (d_maxes or sorted(set(frame["d_max"])) if "d_max" in frame else [])]
    fig = make_subplots(
        rows=2,
        cols=2,
        subplot_titles=[title for _, title in SWEEP_METRICS],
        horizontal_spacing=0.2,  # room for the left heatmaps' colour bars and the right ones' alpha axis
        vertical_spacing=0.2,
    )
    from libraspec.analysis.best_cell import best_cell

    x = [str(d) for d in d_maxes]
    ties = []  # metrics where no cell is ahead of the others (within noise, or identical decisions)
    for k, (metric, title) in enumerate(SWEEP_METRICS):
        row, col = k // 2 + 1, k % 2 + 1
        z = np.full((len(alphas), len(d_maxes)), np.nan)  # (alphas, d_maxes)
        for a, d, v in zip(frame.get("alpha", []), frame.get("d_max", []), frame.get(metric, [])):
            if str(a) in alphas and int(d) in d_maxes and v is not None and not pd.isna(v):
                z[alphas.index(str(a)), d_maxes.index(int(d))] = float(v)
        fig.add_trace(
            go.Heatmap(
                z=z,
                x=x,
                y=alphas,
                name=metric,
                colorscale="Viridis_r" if metric == "mad_vs_oracle" else "Viridis",
                showscale=True,
                colorbar=_colorbar_beside(fig, row, col, title),
                texttemplate="%{z:.2f}",
                hovertemplate=f"alpha %{{y}}, d_max %{{x}}<br>{title}: %{{z:.3f}}<extra></extra>",
            ),
            row=row,
            col=col,
        )
        best = best_cell(frame, metric) if not frame.empty else None
        if best is not None and str(frame["alpha"].iloc[best]) in alphas and int(frame["d_max"].iloc[best]) in d_maxes:
            fig.add_trace(
                go.Scatter(
                    x=[str(int(frame["d_max"].iloc[best]))],
                    y=[str(frame["alpha"].iloc[best])],
                    mode="markers",
                    name=f"best {metric}",
                    showlegend=False,
                    marker=dict(symbol="square-open", size=30, color="#D55E00", line=dict(width=3)),
                    hovertemplate=f"best {title}<extra></extra>",
                ),
                row=row,
                col=col,
            )
        elif np.isfinite(z).sum() > 1:
            ties.append(title)
        fig.update_xaxes(title_text="d_max", type="category", categoryorder="array", categoryarray=x, row=row, col=col)
        fig.update_yaxes(
            title_text="alpha",
            type="category",
            categoryorder="array",
            categoryarray=alphas,
            autorange="reversed",
            row=row,
            col=col,
        )
    if frame.empty:
        empty_figure(fig, "no finished cells yet")
    heading = "LibraSpec over alpha x d_max (outlined: best cell)"
    if ties:
        heading += f"<br><sup>no cell ahead of the rest (tied, or within timing noise): {', '.join(ties)}</sup>"
    return apply_layout(fig, "sweep", heading)


def calibration_figure(bins: pd.DataFrame, by_position: pd.DataFrame, ece: float) -> go.Figure:
    """Reliability diagram (acceptance vs confidence per bin, `calibration.reliability_table`)
    and acceptance rate by draft position with the mean q_i (`calibration.acceptance_by_position`)."""
    fig = make_subplots(
        rows=1,
        cols=2,
        horizontal_spacing=0.12,
        subplot_titles=("reliability: acceptance vs confidence q_i", "by draft position i"),
    )
    centers = ((bins["lo"] + bins["hi"]) / 2).tolist() if not bins.empty else []
    fig.add_trace(
        go.Bar(
            x=centers,
            y=bins["acceptance"].tolist() if not bins.empty else [],
            width=0.09,
            name="acceptance rate",
            marker_color=MODE_COLORS[PAPER],
            opacity=0.7,
            customdata=bins["count"].tolist() if not bins.empty else [],
            hovertemplate="bin %{x:.2f}<br>accepted %{y:.3f}<br>%{customdata} drafts<extra></extra>",
        ),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Scatter(
            x=bins["confidence"].tolist() if not bins.empty else [],
            y=bins["acceptance"].tolist() if not bins.empty else [],
            mode="markers",
            name="mean q in bin",
            marker=dict(color="#000000", size=6),
        ),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Scatter(
            x=[0, 1], y=[0, 1], mode="lines", name="perfect calibration", line=dict(color="#999999", dash="dash")
        ),
        row=1,
        col=1,
    )
    if not by_position.empty:
        fig.add_trace(
            go.Bar(
                x=by_position["position"].tolist(),
                y=by_position["acceptance"].tolist(),
                name="acceptance by position",
                marker_color=MODE_COLORS[BASELINE],
                opacity=0.7,
                customdata=by_position["count"].tolist(),
                hovertemplate="i = %{x}<br>accepted %{y:.3f}<br>%{customdata} drafts<extra></extra>",
            ),
            row=1,
            col=2,
        )
        fig.add_trace(
            go.Scatter(
                x=by_position["position"].tolist(),
                y=by_position["confidence"].tolist(),
                name="mean q_i",
                mode="lines+markers",
                line=dict(color="#56B4E9"),
            ),
            row=1,
            col=2,
        )
    right = max(int(by_position["position"].max()) if not by_position.empty else 0, MIN_LENGTH_AXIS)
    fig.update_xaxes(title_text="confidence q_i", range=[0, 1], row=1, col=1)
    fig.update_xaxes(title_text="draft position i", range=[0.5, right + 0.5], row=1, col=2)
    fig.update_yaxes(title_text="acceptance rate", range=[0, 1.05], row=1, col=1)
    fig.update_yaxes(range=[0, 1.05], row=1, col=2)
    if bins.empty or bins["count"].sum() == 0:
        empty_figure(fig, "no submitted drafts yet")
    text = "n/a" if not math.isfinite(ece) else f"{ece:.3f}"
    return apply_layout(
        fig, "calibration", f"Drafter calibration: expected calibration error {text} ({len(bins)} bins)"
    )
