"""Plotly figures built from round-record DataFrames only (`records.records_to_frame`).

Every builder reads the frozen record columns, never engine internals, so the app, the
benchmarks and saved traces (`records.read_trace`) draw the same pictures. Symbols follow
the LibraSpec paper: d (chosen speculative length), d* (oracle length), q_i (drafter
confidence of draft i), eps_i (Algorithm 1 bound, eq. in line 6), B (draft budget),
n (block size), alpha, tau (tokens committed per round). Draft trees (tree modes): each node
holds a token x with its confidence q(x); its path probability is the product of q along its
root path; the root is the last committed token.

Conventions shared by every figure: one colour per mode (`MODE_COLORS`), a fixed height (the
draft tree's grows with its rows, so that wide trees stay readable),
axes that span the data shown (a length axis reaches the longest d or d* drawn, not d_max),
a title short enough for half a laptop screen with the legend at the bottom of the figure,
where it cannot cover the title, and a constant `uirevision` per figure kind so a user's
zoom survives live updates.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from libraspec.drafters import SOURCE_TITLES
from libraspec.modes import AR, MODES, ORACLE, PAPER
from libraspec.policy import epsilon_bounds, worked_bounds
from libraspec.records import step_action
from libraspec.tree import path_probabilities

MODE_COLORS: dict[str, str] = {name: mode.colour for name, mode in MODES.items()}
MODE_ORDER = tuple(MODE_COLORS)
FALLBACK_COLOR = "#333333"
TEMPLATE = "plotly_white"
HEIGHTS = {
    "length": 340,
    "heatmap": 380,
    "epsilon": 560,
    "speedup": 340,
    "profile": 360,
    "stepper": 440,
    "expected": 380,
    "sweep": 660,
    "calibration": 440,
    "tree": 560,
    "tree_sizes": 560,
    "whatif": 380,
    "whatif_grid": 380,
}
MIN_LENGTH_AXIS = 24  # an empty figure's length axis shows 0..d_max (paper's DFlash d_max = 24)
DODGE = 0.18  # horizontal offset between the d* markers of different modes in one round
TOKEN_CHARS = 10  # a tree node's label shows at most this many characters of its token
OFF_PATH_COLOR = "#9E9E9E"  # tree nodes and edges off the accepted path
TABLE_ROW_PX = 24  # one row of the round figure's table of Algorithm 1 iterations
TREE_ROW_PX = 15  # the tree figure grows beyond its height so that each row of node labels keeps this much


def mode_color(mode: str) -> str:
    return MODE_COLORS.get(mode, FALLBACK_COLOR)


def _modes(frame: pd.DataFrame) -> list[str]:
    """Modes present in `frame`, in the canonical order, unknown modes last."""
    present = list(dict.fromkeys(frame["mode"])) if "mode" in frame else []
    known = [m for m in MODE_ORDER if m in present]
    return known + [m for m in present if m not in MODE_COLORS]


def apply_layout(fig: go.Figure, kind: str, title: str, **extra: Any) -> go.Figure:
    """Template, height, title at the top left and legend at the bottom of the figure (below the
    axis title, in a margin of its own), so neither covers the other."""
    fig.update_layout(
        template=TEMPLATE,
        height=HEIGHTS[kind],
        uirevision=kind,
        title=dict(text=title, x=0.01, xanchor="left", y=0.985, yanchor="top", yref="container", font=dict(size=14)),
        margin=dict(l=60, r=20, t=44, b=96),
        legend=dict(orientation="h", x=0.0, xanchor="left", y=0.0, yanchor="bottom", yref="container"),
        **extra,
    )
    return fig


def empty_figure(fig: go.Figure, message: str) -> go.Figure:
    fig.add_annotation(
        text=message, showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5, font=dict(size=14, color="#888888")
    )
    return fig


def ar_line(fig: go.Figure) -> None:
    """The dotted line at speedup 1 (AR's pace) of every speedup figure."""
    fig.add_hline(
        y=1.0,
        line=dict(color=MODE_COLORS[AR], width=1, dash="dot"),
        annotation_text="AR",
        annotation_position="bottom right",
    )


def _rows(frame: pd.DataFrame, mode: str) -> pd.DataFrame:
    return frame[frame["mode"] == mode].sort_values("round_index")


def _present(value: Any) -> bool:
    """True for a real oracle length; False for None / NaN (pandas turns None into NaN)."""
    return value is not None and not (isinstance(value, float) and math.isnan(value))


HIGHLIGHT = "#D55E00"  # the inspected round's mark in the length figure and the heatmap


def length_figure(frame: pd.DataFrame, highlight: tuple[str, int] | None = None) -> go.Figure:
    """Chosen length d per round for each mode (solid steps) and each round's d* (open diamonds,
    each mode's shifted sideways, so equal d* of two modes in one round do not hide each other).

    The y axis spans the longest d or d* drawn. `highlight` = (mode, round): a band marks the round
    the inspector shows, labelled with the mode's d there.
    """
    fig = go.Figure()
    top, last_round = 1, 0
    annotated = [m for m in _modes(frame) if _kind(m) not in ("ar", "oracle")]
    for mode in _modes(frame):
        rows = _rows(frame, mode)
        if _kind(mode) == "ar" or rows.empty:
            continue
        x = rows["round_index"].tolist()
        last_round = max(last_round, max(x))
        top = max(top, int(rows["chosen_length"].max()))
        fig.add_trace(
            go.Scatter(
                x=x,
                y=rows["chosen_length"].tolist(),
                name=f"{mode} d",
                mode="lines+markers",
                line=dict(color=mode_color(mode), shape="hv", width=2),
                marker=dict(size=4),
                legendgroup=mode,
                hovertemplate=f"{mode}<br>round %{{x}}<br>d = %{{y}}<extra></extra>",
            )
        )
        oracle = [(r, v) for r, v in zip(x, rows["oracle_length"]) if _present(v)]
        if _kind(mode) != "oracle" and oracle:
            ox, oy = zip(*oracle)
            top = max(top, int(max(oy)))
            shift = DODGE * (annotated.index(mode) - (len(annotated) - 1) / 2)
            fig.add_trace(
                go.Scatter(
                    x=[r + shift for r in ox],
                    y=[int(v) for v in oy],
                    name=f"{mode} d*",
                    mode="markers",
                    marker=dict(size=7, symbol="diamond-open", color=mode_color(mode), line=dict(width=1.5)),
                    legendgroup=mode,
                    customdata=list(ox),
                    hovertemplate=f"{mode}<br>round %{{customdata}}<br>d* = %{{y}}<extra></extra>",
                )
            )
    if not fig.data:
        empty_figure(fig, "no rounds yet")
        top = MIN_LENGTH_AXIS
    elif highlight is not None:
        mode, round_index = highlight
        rows = _rows(frame, mode) if mode in _modes(frame) else frame.iloc[0:0]
        chosen = rows.loc[rows["round_index"] == round_index, "chosen_length"]
        if not chosen.empty:
            fig.add_vrect(
                x0=round_index - 0.5,
                x1=round_index + 0.5,
                fillcolor=HIGHLIGHT,
                opacity=0.15,
                line_width=0,
                layer="below",
                annotation_text=f"round {round_index}: {mode} d = {int(chosen.iloc[0])}",
                annotation_position="top left",
                annotation_font_size=11,
            )
    return apply_layout(
        fig,
        "length",
        "Length d per round (diamonds: oracle d*)",
        xaxis=dict(title="round", range=[-0.5, max(last_round, 10) + 0.5], zeroline=False),
        yaxis=dict(title="d (draft tokens)", range=[0, top + 1], dtick=max(1, -(-top // 8))),
    )


def _source_text(sources) -> str:
    """The drafters named in `sources` (one per draft), in words: "diffusion", "look-up + diffusion"."""
    names = list(dict.fromkeys(SOURCE_TITLES.get(s, s) for s in sources))
    return " + ".join(names)


def confidence_heatmap(frame: pd.DataFrame, mode: str = PAPER, highlight: int | None = None) -> go.Figure:
    """Rounds x draft positions, colour = q_i; markers at the chosen d and the accepted a.

    A marker sits on the boundary after the last position it covers (x = d + 0.5,
    x = a + 0.5), so the cells left of it are the submitted / accepted drafts. Hovering a
    cell names the drafter that proposed it. The x axis spans the drafted positions, nothing more: an
    oracle d* past them (its look-ahead drafts further than the round did) is a triangle on the right
    edge whose hover gives its value. `highlight`: the round the inspector shows, outlined.
    """
    rows = _rows(frame, mode) if "mode" in frame else frame.iloc[0:0]
    fig = go.Figure()
    width = max((len(q) for q in rows["confidences"]), default=0) if not rows.empty else 0
    if rows.empty or width == 0:
        empty_figure(fig, f"no drafted rounds for {mode}")
        return apply_layout(
            fig,
            "heatmap",
            f"Confidence q_i per round ({mode})",
            xaxis=dict(range=[0.5, MIN_LENGTH_AXIS + 0.5]),
            yaxis=dict(range=[0, 10]),
        )
    rounds = rows["round_index"].tolist()
    z = np.full((len(rows), width), np.nan)  # (rounds, positions)
    origin = np.full((len(rows), width), "", dtype=object)  # (rounds, positions)
    sources = rows["draft_sources"] if "draft_sources" in rows else [()] * len(rows)
    for k, (q, drafted_by) in enumerate(zip(rows["confidences"], sources)):
        z[k, : len(q)] = q
        origin[k, : len(drafted_by)] = [SOURCE_TITLES.get(s, s) for s in drafted_by]
    fig.add_trace(
        go.Heatmap(
            z=z,
            x=list(range(1, width + 1)),
            y=rounds,
            zmin=0.0,
            zmax=1.0,
            colorscale="Viridis",
            name="q_i",
            colorbar=dict(title="q_i", thickness=12, len=0.9),
            customdata=origin,
            hovertemplate="round %{y}<br>position i = %{x}<br>q_i = %{z:.3f}<br>drafted by %{customdata}"
            "<extra></extra>",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=[d + 0.5 for d in rows["chosen_length"]],
            y=rounds,
            name="chosen d",
            mode="markers",
            marker=dict(symbol="square", size=7, color="#FFFFFF", line=dict(width=1.5, color="#000000")),
            customdata=rows["chosen_length"].tolist(),
            hovertemplate="round %{y}<br>d = %{customdata}<extra></extra>",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=[a + 0.5 for a in rows["accepted"]],
            y=rounds,
            name="accepted a",
            mode="markers",
            marker=dict(symbol="circle", size=7, color=mode_color(mode), line=dict(width=1, color="#FFFFFF")),
            customdata=rows["accepted"].tolist(),
            hovertemplate="round %{y}<br>accepted a = %{customdata}<extra></extra>",
        )
    )
    right = max(width, int(rows["chosen_length"].max()), int(rows["accepted"].max()))
    oracle = [(r, int(v)) for r, v in zip(rounds, rows["oracle_length"]) if _present(v)]
    if oracle:  # a d* past the drafted positions (the oracle's look-ahead drafts further) sits on the edge
        beyond = [v > right for _, v in oracle]
        fig.add_trace(
            go.Scatter(
                x=[min(v, right) + 0.5 for _, v in oracle],
                y=[r for r, _ in oracle],
                name="oracle d*",
                mode="markers",
                marker=dict(
                    symbol=["triangle-right-open" if far else "diamond-open" for far in beyond],
                    size=9,
                    color=MODE_COLORS[ORACLE],
                    line=dict(width=2),
                ),
                customdata=[
                    f"{v} (past the drafted positions: drawn at the edge)" if far else str(v)
                    for (_, v), far in zip(oracle, beyond)
                ],
                hovertemplate="round %{y}<br>d* = %{customdata}<extra></extra>",
            )
        )
    if highlight is not None and highlight in rounds:
        fig.add_shape(
            type="rect",
            x0=0.5,
            x1=right + 0.5,
            y0=highlight - 0.5,
            y1=highlight + 0.5,
            line=dict(color=HIGHLIGHT, width=2.5),
            fillcolor="rgba(0,0,0,0)",
            name=f"round {highlight}",
        )
    return apply_layout(
        fig,
        "heatmap",
        f"Confidence q_i per round ({mode})",
        xaxis=dict(title="draft position i", range=[0.5, right + 1], dtick=max(1, -(-right // 12))),
        yaxis=dict(title="round", autorange="reversed"),
    )


def _record_value(record_row: pd.Series | Mapping[str, Any], key: str) -> Any:
    return record_row[key] if key in record_row else None


def _sequence(record_row: pd.Series | Mapping[str, Any], key: str) -> list:
    value = _record_value(record_row, key)
    return [] if value is None else list(value)


def epsilon_figure(record_row: pd.Series | Mapping[str, Any], alpha: float) -> go.Figure:
    """eps_i bounds of one round (bars), the chosen d (line), eps* = min_i eps_i (dashed),
    and a table of every Algorithm 1 iteration (lines 5-13) from `policy_steps`.

    `record_row` is one row of a record frame (`frame.iloc[k]`) or a mapping with the
    same keys. The bars are the record's `eps_bounds` (eps_i over q_1..q_d at the
    chosen d, Algorithm 1 line 6); a record without them (static, oracle, ...) gets
    them from its confidences with the given alpha. q_i is drawn on a second axis: for a tree
    mode the tree's per-depth confidences, which its depth policy read, not the drafter's chain.
    """
    mode = str(_record_value(record_row, "mode"))
    d = int(_record_value(record_row, "chosen_length"))
    eps = [int(e) for e in _sequence(record_row, "eps_bounds")]
    # the q_i the policy read: a tree mode's per-depth confidences (`tree.depth_confidences`), else the chain's
    tree_q = [float(v) for v in _sequence(record_row, "tree_confidences")] if "tree_confidences" in record_row else []
    q = tree_q or [float(v) for v in _sequence(record_row, "confidences")]
    if not eps and 0 < d <= len(q):
        eps = epsilon_bounds(q[:d], alpha).tolist()  # modes that record no bounds
    steps = _sequence(record_row, "policy_steps")
    # the table shows every iteration (issue 45: 4 of 9 rows fitted): the figure grows by its rows
    chart_px, table_px = 242.0, TABLE_ROW_PX * (max(len(steps), 1) + 1) + 12  # the chart keeps its size
    fig = make_subplots(
        rows=2,
        cols=1,
        row_heights=[chart_px / (chart_px + table_px), table_px / (chart_px + table_px)],
        vertical_spacing=0.1,
        specs=[[{"type": "xy", "secondary_y": True}], [{"type": "table"}]],
    )
    width = max(len(eps), d, 1)
    used = _round_alpha(record_row, alpha)  # the record's own alpha when it has one
    if eps:
        shown_q = q[: len(eps)]
        same = len(shown_q) == len(eps) and epsilon_bounds(shown_q, used).tolist() == eps
        worked = worked_bounds(shown_q, used) if same else None  # the bars' numbers written out on hover
        _add_bounds(fig, eps, mode, width, "eps_i", f"eps* = {min(eps)}", worked=worked)
    fig.add_trace(
        go.Scatter(
            x=[0.5, width + 0.5],
            y=[d, d],
            name=f"chosen d = {d}",
            mode="lines",
            line=dict(color=MODE_COLORS[ORACLE] if _kind(mode) == "oracle" else "#444444", width=2),
        ),
        row=1,
        col=1,
    )
    if q:
        shown = q[:width]
        fig.add_trace(
            go.Scatter(
                x=list(range(1, len(shown) + 1)),
                y=shown,
                name="q_i (the tree's, per depth)" if tree_q else "q_i",
                mode="lines+markers",
                line=dict(color="#56B4E9", width=1.5),
                marker=dict(size=4),
                hovertemplate="i = %{x}<br>q_i = %{y:.3f}<extra></extra>",
            ),
            row=1,
            col=1,
            secondary_y=True,
        )
    header = ["iter", "d before", "eps*", "d after", "B", "blocks", "action"]
    if not steps:  # a policy without Algorithm 1 (static, oracle) or a round it did not run in
        header[0] = "no Algorithm 1 iterations"
    cells = [
        list(range(1, len(steps) + 1)),
        [s["d_before"] for s in steps],
        [s["eps_star"] for s in steps],
        [s["d_after"] for s in steps],
        [s["budget"] for s in steps],
        [s["blocks_requested"] for s in steps],
        [step_action(s["d_before"], s["d_after"], s["rollback"]) for s in steps],
    ]
    fig.add_trace(
        go.Table(
            header=dict(values=header, fill_color="#EEEEEE", align="center"),
            cells=dict(values=cells, align="center", height=TABLE_ROW_PX),
            name="Algorithm 1 steps",
        ),
        row=2,
        col=1,
    )
    top = max(eps + [d, 1])
    if steps and eps and q and not tree_q:  # a tree's per-depth q change as it deepens: only the final ones are kept
        top = max(top, _iteration_stepper(fig, steps, q, _round_alpha(record_row, alpha), mode, main=2))
    fig.update_xaxes(
        title_text="draft position i", range=[0.5, width + 0.5], dtick=max(1, -(-width // 12)), row=1, col=1
    )
    fig.update_yaxes(title_text="eps_i", range=[0, top * 1.15 + 1], row=1, col=1)
    fig.update_yaxes(title_text="q_i", range=[0, 1.05], showgrid=False, row=1, col=1, secondary_y=True)
    round_index = _record_value(record_row, "round_index")
    drafted_by = _source_text(_sequence(record_row, "draft_sources")[: max(d, 1)])
    source = f", {drafted_by} drafts" if drafted_by else ""
    apply_layout(fig, "epsilon", f"Round {round_index} ({mode}{source}): eps_i, alpha = {used:g}", barmode="overlay")
    # both panels share 90% of the plot area (the rest is their spacing); the margins and the
    # iterations' slider come on top
    height = (chart_px + table_px) / 0.9 + 140 + (58 if len(fig.layout.sliders) else 0)
    return fig.update_layout(height=max(HEIGHTS["epsilon"], round(height)))


def _add_bounds(
    fig: go.Figure,
    bounds: list[int],
    mode: str,
    width: int,
    name: str,
    star_name: str,
    visible: bool = True,
    worked: list[str] | None = None,
) -> None:
    """Two traces in the top panel: the bounds eps_i as bars carrying their values (their minimum
    outlined; hovering a bar shows its worked line, `policy.worked_bounds`, when given) and eps* as a
    dashed line across `width` positions."""
    star = min(bounds)
    fig.add_trace(
        go.Bar(
            x=list(range(1, len(bounds) + 1)),
            y=bounds,
            name=name,
            marker_color=mode_color(mode),
            opacity=0.75,
            marker_line=dict(width=[3 if e == star else 0 for e in bounds], color="#000000"),
            visible=visible,
            text=bounds,
            textposition="outside",
            customdata=worked if worked else [f"eps_{i} = {e}" for i, e in enumerate(bounds, start=1)],
            hovertemplate="%{customdata}<extra></extra>",
        ),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Scatter(
            x=[0.5, width + 0.5],
            y=[star, star],
            name=star_name,
            mode="lines",
            line=dict(color="#000000", dash="dash", width=1.5),
            visible=visible,
        ),
        row=1,
        col=1,
    )


def _round_alpha(record_row, alpha: float) -> float:
    """The alpha the round's Algorithm 1 used (the record's), else the one given."""
    value = _record_value(record_row, "alpha") if "alpha" in record_row else None
    return float(value) if value is not None and _present(value) else float(alpha)


def _iteration_stepper(fig: go.Figure, steps, q: list[float], alpha: float, mode: str, main: int) -> int:
    """A slider over Algorithm 1's iterations: iteration k shows the bounds eps_i over q_1..q_d that
    its line 6 compared (d = its d before) with their minimum, which is the table's eps* of that row;
    the first position shows the bounds at the submitted d (the `main` traces added before).
    Returns the highest bound drawn."""
    first, top = len(fig.data), 0
    for k, step in enumerate(steps, start=1):
        d_before = int(step["d_before"])
        bounds = epsilon_bounds(q[:d_before], alpha).tolist()
        top = max(top, max(bounds))
        action = step_action(step["d_before"], step["d_after"], step["rollback"])
        label = f"iteration {k}: eps* = {min(bounds)}, {action}"
        _add_bounds(
            fig,
            bounds,
            mode,
            d_before,
            f"iteration {k}: eps_i at d = {d_before}",
            label,
            visible=False,
            worked=worked_bounds(q[:d_before], alpha),
        )
    count = len(fig.data)
    ours = set(range(first, count))

    def showing(own: set[int]) -> list[bool]:
        return [j in own or (j not in ours and j >= main) for j in range(count)]

    positions = [dict(label="submitted d", method="restyle", args=[{"visible": showing(set(range(main)))}])]
    for k in range(1, len(steps) + 1):
        pair = {first + 2 * (k - 1), first + 2 * (k - 1) + 1}
        positions.append(dict(label=f"iteration {k}", method="restyle", args=[{"visible": showing(pair)}]))
    fig.update_layout(
        sliders=[dict(active=0, steps=positions, currentvalue=dict(prefix="Algorithm 1: "), pad=dict(t=30), y=-0.02)]
    )
    return top


def speedup_figure(
    frame: pd.DataFrame, ar_seconds_per_token: float | None, ar_modeled_per_token: float | None
) -> go.Figure:
    """Cumulative speedup over AR after each round: measured (solid) and modeled (dashed).

    eta(t) = (tokens so far * AR seconds per token) / seconds so far, with the measured
    clock (`cumulative_s`) or the latency profile's clock (`cumulative_modeled_s`).
    """
    fig = go.Figure()
    top, right = 2.0, 16
    clocks = (
        ("measured", "cumulative_s", ar_seconds_per_token, "solid"),
        ("modeled", "cumulative_modeled_s", ar_modeled_per_token, "dash"),
    )
    for mode in _modes(frame):
        rows = _rows(frame, mode)
        if _kind(mode) == "ar" or rows.empty:
            continue
        tokens = rows["cumulative_tokens"].to_numpy(dtype=float)
        right = max(right, int(tokens.max()))
        for label, column, per_token, dash in clocks:
            if not per_token or per_token <= 0:
                continue
            seconds = rows[column].to_numpy(dtype=float)
            keep = seconds > 0
            eta = tokens[keep] * per_token / seconds[keep]
            if eta.size:
                top = max(top, float(eta.max()))
            fig.add_trace(
                go.Scatter(
                    x=tokens[keep].tolist(),
                    y=eta.tolist(),
                    name=f"{mode} {label}",
                    mode="lines",
                    line=dict(color=mode_color(mode), dash=dash, width=2),
                    legendgroup=mode,
                    hovertemplate=f"{mode} ({label})<br>%{{x}} tokens<br>%{{y:.2f}}x<extra></extra>",
                )
            )
    if not fig.data:
        empty_figure(fig, "no rounds or no AR baseline yet")
    ar_line(fig)
    return apply_layout(
        fig,
        "speedup",
        "Speedup over AR (solid: measured, dashed: modeled)",
        xaxis=dict(title="generated tokens", range=[0, right * 1.02]),
        yaxis=dict(title="speedup (x)", range=[0, top * 1.1]),
    )


def profile_figure(profile: Any, used_k: int | None = None, context: int | None = None) -> go.Figure:
    """Latency profile: target verification ms vs k new tokens, drafter ms per block count.

    `profile` is a `libraspec.cost.LatencyProfile`: `verify_s[k-1]` is one target forward
    over k new tokens, `draft_s[m-1]` drafting m blocks, and `linear_fit()` gives the
    least-squares line t0 + c k through the verification costs (c: the paper's cost per
    verified position, section 3.3). `used_k`: the most rows a run verified; where it lies beyond
    the measured k, the continuation the model prices those forwards with is drawn dotted and the
    measured range's end is marked. With a context term (`LatencyProfile.context_k`), the forwards
    timed after longer contexts are drawn as hollow markers, and `context` (the longest context a
    run's rounds started from) adds the curve the model prices forwards after it with.
    """
    verify_ms = [1000.0 * v for v in profile.verify_s]
    draft_ms = [1000.0 * v for v in profile.draft_s]
    fig = make_subplots(
        rows=1,
        cols=2,
        column_widths=[0.62, 0.38],
        horizontal_spacing=0.12,
        subplot_titles=("target verification", "drafter"),
    )
    ks = list(range(1, len(verify_ms) + 1))
    fig.add_trace(
        go.Scatter(
            x=ks,
            y=verify_ms,
            name="verify (measured)",
            mode="markers",
            marker=dict(color="#444444", size=6),
            hovertemplate="k = %{x} tokens<br>%{y:.1f} ms<extra></extra>",
        ),
        row=1,
        col=1,
    )
    intercept_s, slope_s = profile.linear_fit()  # verify_s[k-1] ~ t0 + c k
    fig.add_trace(
        go.Scatter(
            x=ks,
            y=[1000.0 * (intercept_s + slope_s * k) for k in ks],
            mode="lines",
            name=f"fit: {1000 * intercept_s:.1f} + {1000 * slope_s:.2f} k ms",
            line=dict(color="#444444", dash="dash", width=1.5),
        ),
        row=1,
        col=1,
    )
    measured_k = len(ks)
    if used_k is not None and used_k > measured_k:
        beyond = list(range(measured_k, int(used_k) + 1))
        fig.add_trace(
            go.Scatter(
                x=beyond,
                y=[1000.0 * profile.verify_time(k) for k in beyond],
                mode="lines",
                name=f"extrapolated: k > {measured_k} not measured",
                line=dict(color="#D55E00", dash="dot", width=2),
                hovertemplate="k = %{x} tokens<br>%{y:.1f} ms (extrapolated)<extra></extra>",
            ),
            row=1,
            col=1,
        )
        fig.add_vline(x=measured_k + 0.5, line=dict(color="#D55E00", width=1, dash="dot"), row=1, col=1)
        verify_ms = verify_ms + [1000.0 * profile.verify_time(int(used_k))]
        ks = list(range(1, int(used_k) + 1))
    fit = profile.meta.get("context_fit", {}) if getattr(profile, "context_k", ()) else {}
    for c, medians in fit.get("median_ms", {}).items():
        if int(c) != profile.context_len:
            fig.add_trace(
                go.Scatter(
                    x=fit["k"],
                    y=medians,
                    name=f"verify after {int(c):,} tokens (measured)",
                    mode="markers",
                    marker=dict(color="#444444", size=7, symbol="circle-open"),
                    hovertemplate=f"k = %{{x}} tokens after {int(c):,}<br>%{{y:.1f}} ms<extra></extra>",
                ),
                row=1,
                col=1,
            )
    if fit and context is not None and int(context) != profile.context_len:
        shown = [1000.0 * profile.verify_time(k, int(context)) for k in ks]
        fig.add_trace(
            go.Scatter(
                x=ks,
                y=shown,
                mode="lines",
                name=(
                    f"after {int(context):,} tokens (modeled: context term, "
                    f"within {100 * fit['max_relative_error']:.0f}% of the timed points)"
                ),
                line=dict(color="#009E73", width=2),
                hovertemplate=f"k = %{{x}} tokens after {int(context):,}<br>%{{y:.1f}} ms (modeled)<extra></extra>",
            ),
            row=1,
            col=1,
        )
        verify_ms = verify_ms + shown
    blocks = list(range(1, len(draft_ms) + 1))
    fig.add_trace(
        go.Bar(
            x=blocks,
            y=draft_ms,
            name="draft (measured)",
            marker_color="#56B4E9",
            hovertemplate="%{x} block(s)<br>%{y:.1f} ms<extra></extra>",
        ),
        row=1,
        col=2,
    )
    top = max(verify_ms + draft_ms + [1.0])
    fig.update_xaxes(title_text="new tokens k", range=[0, len(ks) + 1], row=1, col=1)
    fig.update_xaxes(title_text="blocks", range=[0.4, len(blocks) + 0.6], dtick=1, row=1, col=2)
    fig.update_yaxes(title_text="ms", range=[0, top * 1.15], row=1, col=1)
    fig.update_yaxes(range=[0, top * 1.15], row=1, col=2)
    c0 = getattr(profile, "context_len", 0)
    # the legend stays where apply_layout puts every legend, below the axes: inside the plot area
    # it covered the title and the first points (issue 45)
    return apply_layout(
        fig, "profile", "Latency profile of this machine" + (f" (timed after {c0:,} tokens)" if c0 else "")
    )


def is_tree_mode(mode: str) -> bool:
    """Whether `mode` drafts trees (the registry's kind "tree")."""
    return _kind(mode) == "tree"


def _kind(mode: str) -> str | None:
    """The registry's kind of `mode` ("ar", "oracle", "policy", "tree"); None for a name it lacks."""
    return MODES[mode].kind if mode in MODES else None


def _token_label(text: str) -> str:
    """A token's text for a figure: whitespace made visible, cut to TOKEN_CHARS characters."""
    shown = text.replace("\n", "⏎").replace("\t", "⇥").replace(" ", "·") or "∅"
    return shown if len(shown) <= TOKEN_CHARS else shown[: TOKEN_CHARS - 1] + "…"


def tree_layout(parents: list[int]) -> list[float]:
    """A row (y) per node of a tree given by parent indices (-1: the root's children, parents first):
    leaves take consecutive rows in depth-first order with siblings in rank (index) order, a
    parent sits midway between its first and last child. The root's row is the mean of its
    children's (0 without nodes)."""
    children: dict[int, list[int]] = {}
    for j, parent in enumerate(parents):
        children.setdefault(int(parent), []).append(j)
    rows: dict[int, float] = {}
    leaves = 0
    stack: list[tuple[int, bool]] = [(-1, False)]
    while stack:  # iterative post-order (deep chains must not hit the recursion limit)
        node, done = stack.pop()
        kids = children.get(node, [])
        if done or not kids:
            if kids:
                rows[node] = (rows[kids[0]] + rows[kids[-1]]) / 2
            else:
                rows[node] = float(leaves)
                leaves += 1
            continue
        stack.append((node, True))
        stack.extend((kid, False) for kid in reversed(kids))
    if not parents:
        rows[-1] = 0.0
    return [rows[j] for j in range(len(parents))] + [rows[-1]]


def tree_figure(
    record_row: pd.Series | Mapping[str, Any],
    token_text=str,
    root_text: str | None = None,
    reasons: Sequence[str] | None = None,
) -> go.Figure:
    """One round's draft tree: x = depth (the root, the last committed token, at 0), one marker per
    node labelled with its token's text and q (path probability on hover), edges parent -> child,
    the accepted path (`tree_path`) drawn in the mode's colour and the bonus token after its last
    node. `record_row` is a `RoundRecord`, a frame row or a mapping with the same keys;
    `token_text` maps a token id to its text (default: the id); `root_text` is the root token's
    text (default: "root"). `reasons`: per node, why it entered (the node rule of ddtree-marginal and
    ddtree-priced, `MarginalTreePolicy.reason`), shown on hover. A round without a tree (a chain mode)
    gives an empty figure saying so.
    """
    if dataclasses.is_dataclass(record_row):
        record_row = vars(record_row)
    mode, round_index = str(_record_value(record_row, "mode")), _record_value(record_row, "round_index")
    tokens = [int(t) for t in _sequence(record_row, "tree_tokens")]
    parents = [int(p) for p in _sequence(record_row, "tree_parents")]
    probs = [float(q) for q in _sequence(record_row, "tree_probs")]
    path = [int(j) for j in _sequence(record_row, "tree_path")]
    fig = go.Figure()
    title = f"Round {round_index} ({mode}): draft tree"
    if not is_tree_mode(mode) and not tokens:
        empty_figure(fig, f"{mode} drafts a chain, not a tree: choose a tree mode (ddtree, ...)")
        return apply_layout(fig, "tree", title, xaxis=dict(visible=False), yaxis=dict(visible=False))
    bonus = _record_value(record_row, "bonus_token")
    bonus = int(bonus) if _present(bonus) else None
    # the bonus gets a row of its own: laid out as one more child of the last accepted node
    rows = tree_layout(parents + ([path[-1] if path else -1] if bonus is not None else []))
    root_row = rows[-1]
    depth, path_prob = [0] * len(tokens), path_probabilities(parents, probs)
    for j, parent in enumerate(parents):
        depth[j] = 1 + (depth[parent] if parent >= 0 else 0)
    texts = [str(token_text(t)) for t in tokens]
    ex, ey = [], []
    for j, parent in enumerate(parents):
        ex += [depth[parent] if parent >= 0 else 0, depth[j], None]
        ey += [rows[parent] if parent >= 0 else root_row, rows[j], None]
    colour = mode_color(mode)
    on_path = set(path)
    fig.add_trace(
        go.Scatter(x=ex, y=ey, mode="lines", name="edges", hoverinfo="skip", line=dict(color=OFF_PATH_COLOR, width=1))
    )
    fig.add_trace(
        go.Scatter(
            x=[0] + [depth[j] for j in path],
            y=[root_row] + [rows[j] for j in path],
            mode="lines",
            name=f"accepted path ({len(path)})",
            line=dict(color=colour, width=4),
            hoverinfo="skip",
            customdata=path,
        )
    )
    fig.add_trace(
        go.Scatter(
            x=depth,
            y=rows[: len(tokens)],
            mode="markers+text",
            name=f"nodes ({len(tokens)})",
            text=[f"{_token_label(t)} {q:.2f}" for t, q in zip(texts, probs)],
            textposition="middle right",
            textfont=dict(size=11, color=["#000000" if j in on_path else "#555555" for j in range(len(tokens))]),
            marker=dict(
                size=[11 if j in on_path else 7 for j in range(len(tokens))],
                color=[colour if j in on_path else "#FFFFFF" for j in range(len(tokens))],
                line=dict(width=1.5, color=[colour if j in on_path else OFF_PATH_COLOR for j in range(len(tokens))]),
            ),
            customdata=[
                [j, repr(t), tok, q, pp, "" if reasons is None else f"<br>entered: {reasons[j]}"]
                for j, (t, tok, q, pp) in enumerate(zip(texts, tokens, probs, path_prob))
            ],
            hovertemplate="node %{customdata[0]} · depth %{x}<br>token %{customdata[1]} (id %{customdata[2]})"
            "<br>q = %{customdata[3]:.3f}<br>path probability = %{customdata[4]:.4f}%{customdata[5]}<extra></extra>",
        )
    )
    root = "root" if root_text is None else _token_label(root_text)
    fig.add_trace(
        go.Scatter(
            x=[0],
            y=[root_row],
            mode="markers+text",
            name="root (last committed token)",
            text=[root],
            textposition="middle left",
            textfont=dict(size=11),
            marker=dict(size=12, symbol="square", color="#444444"),
            hovertemplate="the last committed token<extra></extra>",
        )
    )
    right = max(depth, default=0)
    if bonus is not None:
        x, y = len(path) + 1, rows[len(tokens)]
        text = str(token_text(bonus))
        right = max(right, x)
        last = (depth[path[-1]], rows[path[-1]]) if path else (0, root_row)
        fig.add_trace(
            go.Scatter(  # a dotted edge from the last accepted node, then the bonus
                x=[last[0], x],
                y=[last[1], y],
                mode="lines+markers+text",
                name="bonus (the target's token)",
                text=["", f"bonus {_token_label(text)}"],
                textposition="middle right",
                textfont=dict(size=11, color=colour),
                line=dict(color=colour, width=2, dash="dot"),
                marker=dict(size=[0, 14], symbol="star", color=colour, line=dict(width=1, color="#000000")),
                customdata=[[repr(text), bonus]] * 2,
                hovertemplate="bonus token %{customdata[0]} (id %{customdata[1]})<extra></extra>",
            )
        )
    top = max(rows)
    apply_layout(
        fig,
        "tree",
        f"{title}: {len(tokens)} nodes, depth {max(depth, default=0)}, accepted {len(path)}",
        xaxis=dict(title="depth (0 = the last committed token)", range=[-0.8, right + 1.2], dtick=1, zeroline=False),
        yaxis=dict(visible=False, range=[top + 0.8, -0.8]),
    )
    # the one figure whose height follows its data: a wide tree keeps TREE_ROW_PX per row of labels
    fig.update_layout(height=max(HEIGHTS["tree"], 150 + TREE_ROW_PX * (top + 1)))
    return fig


def tree_size_figure(frame: pd.DataFrame, mode: str) -> go.Figure:
    """Per round of a tree mode: the tree's size (nodes verified besides the root, bars), the
    accepted path length a (bars), tau = a + bonus (markers) and the oracle's hindsight-best size
    (open diamonds, where annotated). A chain mode gives an empty figure saying so."""
    rows = _rows(frame, mode) if "mode" in frame else frame.iloc[0:0]
    fig = go.Figure()
    title = f"Tree size and accepted length per round ({mode})"
    if rows.empty or not is_tree_mode(mode):
        empty_figure(fig, f"no tree rounds for {mode}" + ("" if is_tree_mode(mode) else ": it drafts a chain"))
        return apply_layout(fig, "tree_sizes", title, xaxis=dict(range=[-0.5, 10.5]), yaxis=dict(range=[0, 10]))
    x = rows["round_index"].tolist()
    colour = mode_color(mode)
    sizes, accepted = rows["tree_size"].astype(int).tolist(), rows["accepted"].astype(int).tolist()
    tau = [len(c) for c in rows["committed_tokens"]]
    for y, name, opacity, hover in (
        (sizes, "tree size (nodes)", 0.35, "%{y} nodes"),
        (accepted, "accepted a", 1.0, "accepted a = %{y}"),
    ):
        fig.add_trace(
            go.Bar(
                x=x,
                y=y,
                name=name,
                marker_color=colour,
                opacity=opacity,
                hovertemplate=f"round %{{x}}<br>{hover}<extra></extra>",
            )
        )
    fig.add_trace(
        go.Scatter(
            x=x,
            y=tau,
            name="τ (a + bonus)",
            mode="markers",
            marker=dict(symbol="line-ew-open", size=14, color="#000000", line=dict(width=2)),
            hovertemplate="round %{x}<br>τ = %{y}<extra></extra>",
        )
    )
    top = max(sizes + tau + [1])
    if "oracle_tree_size" in rows:
        oracle = [(r, int(v)) for r, v in zip(x, rows["oracle_tree_size"]) if _present(v)]
        if oracle:
            top = max(top, max(v for _, v in oracle))
            fig.add_trace(
                go.Scatter(
                    x=[r for r, _ in oracle],
                    y=[v for _, v in oracle],
                    name="oracle size",
                    mode="markers",
                    marker=dict(symbol="diamond-open", size=8, color=MODE_COLORS[ORACLE], line=dict(width=1.5)),
                    hovertemplate="round %{x}<br>oracle size = %{y}<extra></extra>",
                )
            )
    return apply_layout(
        fig,
        "tree_sizes",
        title,
        barmode="overlay",
        xaxis=dict(title="round", range=[-0.5, max(max(x), 10) + 0.5]),
        yaxis=dict(title="nodes / tokens", range=[0, top * 1.1 + 1]),
    )
