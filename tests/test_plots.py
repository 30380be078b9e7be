"""Figure builders on a hand-made record set: trace names, counts, lengths, mode colours."""

from __future__ import annotations

import dataclasses
import math

import pandas as pd
import plotly.graph_objects as go
import pytest

from libraspec.cost import LatencyProfile
from libraspec.policy import epsilon_bounds, worked_bounds
from libraspec.records import PolicyStep, RoundRecord, read_trace, records_to_frame, write_csv
from libraspec.views import plots

LAYER = "unit"  # tests/conftest.py

N = 4  # block size of the hand-made rounds


def _round(
    mode: str,
    k: int,
    d: int,
    accepted: int,
    blocks: int,
    q: list[float],
    oracle: int | None,
    steps=(),
    eps=(),
    clock: tuple[float, float] = (0.0, 0.0),
    tokens_before: int = 0,
) -> RoundRecord:
    tau = accepted + 1
    return RoundRecord(
        mode=mode,
        round_index=k,
        start_position=10 + tokens_before,
        draft_tokens=tuple(range(blocks * N)),
        confidences=tuple(q),
        blocks_drafted=blocks,
        policy_steps=tuple(steps),
        eps_bounds=tuple(eps),
        chosen_length=d,
        accepted=accepted,
        committed_tokens=tuple(range(100, 100 + tau)),
        bonus_token=99,
        oracle_length=oracle,
        draft_s=0.01,
        policy_s=0.001,
        verify_s=0.05,
        modeled_s=0.05,
        cumulative_tokens=tokens_before + tau,
        cumulative_s=clock[0],
        cumulative_modeled_s=clock[1],
    )


def _run(
    mode: str, lengths: list[int], accepted: list[int], blocks: list[int], oracle: list[int | None]
) -> list[RoundRecord]:
    out, tokens, seconds = [], 0, 0.0
    for k, (d, a, b, o) in enumerate(zip(lengths, accepted, blocks, oracle)):
        q = [0.9 - 0.05 * i for i in range(b * N)]
        steps, eps = (), ()
        if mode == "libraspec":
            eps = tuple(int(e) for e in epsilon_bounds(q[:d], 2.2))
            steps = (PolicyStep(N, min(eps) + 1, d + 1, 3, 1, False), PolicyStep(d + 1, d, d, 0, 0, True))
        seconds += 0.06
        out.append(_round(mode, k, d, a, b, q, o, steps, eps, (seconds, seconds * 0.9), tokens))
        tokens += a + 1
    return out


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    records = (
        _run("ar", [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [None] * 4)
        + _run("static", [4, 4, 4], [1, 4, 0], [1, 1, 1], [5, 6, 2])
        + _run("libraspec", [6, 3, 5, 8], [2, 3, 1, 8], [2, 1, 2, 2], [6, 3, 2, 8])
        + _run("oracle", [5, 3], [3, 3], [2, 1], [5, 3])
    )
    return records_to_frame(records)


def _by_name(fig: go.Figure) -> dict[str, go.BaseTraceType]:
    return {t.name: t for t in fig.data}


def _line_colour(trace) -> str:
    return trace.marker.color if isinstance(trace, go.Bar) else trace.line.color


def _assert_common(fig: go.Figure, kind: str) -> None:
    assert fig.layout.height == plots.HEIGHTS[kind]
    assert fig.layout.uirevision == kind


def test_mode_colours_are_distinct_and_cover_every_mode():
    assert set(plots.MODE_COLORS) == {
        "ar",
        "static",
        "libraspec",
        "libraspec-priced",
        "oracle",
        "g4",
        "failfast",
        "ddtree",
        "ddtree-libraspec",
        "ddtree-marginal",
        "ddtree-priced",
        "sglang-adaptive",
        "hf-threshold",
        "vllm-adaptive",
        "vllm-schedule",
    }
    assert len(set(plots.MODE_COLORS.values())) == len(plots.MODE_COLORS)


def test_length_figure_traces(frame):
    fig = plots.length_figure(frame)
    _assert_common(fig, "length")
    traces = _by_name(fig)
    # AR has no d; oracle's own d is d*, so it gets no separate d* line.
    assert set(traces) == {"static d", "static d*", "libraspec d", "libraspec d*", "oracle d"}
    assert list(traces["libraspec d"].y) == [6, 3, 5, 8]
    assert list(traces["libraspec d*"].y) == [6, 3, 2, 8]
    assert list(traces["static d"].x) == [0, 1, 2]
    for name, trace in traces.items():
        colour = plots.MODE_COLORS[name.split()[0]]
        if name.endswith("d*"):  # d* as markers
            assert trace.mode == "markers" and trace.marker.color == colour
        else:
            assert _line_colour(trace) == colour and trace.line.shape == "hv"


def test_length_figure_axis_spans_the_lengths_drawn(frame):
    """d <= 8 here: the y axis ends just above 8, not at d_max = 24 (where it was fixed before)."""
    assert plots.length_figure(frame).layout.yaxis.range[1] == 9


def test_length_figure_d_star_markers_of_two_modes_never_coincide(frame):
    """Static's d* is (5, 6, 2), LibraSpec's (6, 3, 2, 8): in round 2 both are 2, and two dashed lines
    drawn over each other hid one. Each mode's markers sit at their own x offset, so both stay visible."""
    traces = _by_name(plots.length_figure(frame))
    static = set(zip(traces["static d*"].x, traces["static d*"].y))
    libraspec = set(zip(traces["libraspec d*"].x, traces["libraspec d*"].y))
    assert not static & libraspec
    assert sorted(round(x) for x, y in static) == [0, 1, 2] and list(traces["static d*"].customdata) == [0, 1, 2]


def test_length_figure_skips_missing_oracle_annotations(frame):
    rows = frame[frame["mode"] == "static"].copy()
    rows["oracle_length"] = [None, 4, None]
    traces = _by_name(plots.length_figure(rows))
    assert list(traces["static d*"].x) == [1]


def test_confidence_heatmap(frame):
    fig = plots.confidence_heatmap(frame, "libraspec")
    _assert_common(fig, "heatmap")
    traces = _by_name(fig)
    assert set(traces) == {"q_i", "chosen d", "accepted a", "oracle d*"}
    heat = traces["q_i"]
    assert len(heat.z) == 4 and len(heat.z[0]) == 2 * N  # rounds x widest drafted round
    assert math.isnan(heat.z[1][N])  # round 1 drafted one block only
    assert heat.zmin == 0 and heat.zmax == 1
    assert list(traces["chosen d"].x) == [6.5, 3.5, 5.5, 8.5]
    assert list(traces["accepted a"].x) == [2.5, 3.5, 1.5, 8.5]
    assert traces["accepted a"].marker.color == plots.MODE_COLORS["libraspec"]


def test_the_inspected_round_is_marked_in_the_heatmap_and_the_length_figure(frame):
    heat = plots.confidence_heatmap(frame, "libraspec", highlight=1)
    (shape,) = heat.layout.shapes
    assert (shape.y0, shape.y1) == (0.5, 1.5) and shape.line.color == plots.HIGHLIGHT
    assert not plots.confidence_heatmap(frame, "libraspec").layout.shapes
    assert not plots.confidence_heatmap(frame, "libraspec", highlight=99).layout.shapes  # no such round
    length = plots.length_figure(frame, highlight=("static", 2))
    (band,) = length.layout.shapes
    assert (band.x0, band.x1) == (1.5, 2.5)
    assert length.layout.annotations[-1].text == "round 2: static d = 4"
    assert not plots.length_figure(frame).layout.shapes


def test_confidence_heatmap_axis_spans_the_drafted_positions(frame):
    """Positions 1..8 drafted, markers up to 8.5: the x axis ends at 9, not at d_max + 1 = 25 as it did.
    An oracle d* past the drafted positions (static drafted one block of 4; d* was 5 and 6) no longer
    widens the axis over empty columns (issue 45: "runs to 14 or 22 where drafts stop at 7"): it is a
    triangle on the edge, its value in the hover."""
    static = plots.confidence_heatmap(frame, "static")
    assert list(static.layout.xaxis.range) == [0.5, N + 1]
    oracle = _by_name(static)["oracle d*"]
    assert list(oracle.x) == [N + 0.5, N + 0.5, 2.5]
    assert list(oracle.marker.symbol) == ["triangle-right-open", "triangle-right-open", "diamond-open"]
    assert list(oracle.customdata) == [
        "5 (past the drafted positions: drawn at the edge)",
        "6 (past the drafted positions: drawn at the edge)",
        "2",
    ]
    assert list(plots.confidence_heatmap(frame, "libraspec").layout.xaxis.range) == [0.5, 9]


def test_confidence_heatmap_names_each_drafts_source(frame):
    rows = frame[frame["mode"] == "libraspec"].copy()
    rows["draft_sources"] = [
        ("lookup",) * N + ("dflash",) * N,
        ("dflash",) * N,
        ("dflash",) * 2 * N,
        ("dflash",) * 2 * N,
    ]
    heat = _by_name(plots.confidence_heatmap(rows, "libraspec"))["q_i"]
    assert list(heat.customdata[0]) == ["look-up"] * N + ["block diffusion"] * N
    assert list(heat.customdata[1]) == ["block diffusion"] * N + [""] * N and "drafted by" in heat.hovertemplate


def test_confidence_heatmap_without_rows_is_an_empty_figure(frame):
    fig = plots.confidence_heatmap(frame, "g4")
    assert len(fig.data) == 0 and [a.text for a in fig.layout.annotations] == ["no drafted rounds for g4"]


def test_epsilon_figure_libraspec_round(frame):
    row = frame[frame["mode"] == "libraspec"].iloc[0]
    fig = plots.epsilon_figure(row, alpha=2.2)
    _assert_common(fig, "epsilon")
    traces = _by_name(fig)
    eps = list(row["eps_bounds"])
    assert list(traces["eps_i"].y) == eps and list(traces["eps_i"].x) == list(range(1, 7))
    assert traces["eps_i"].marker.color == plots.MODE_COLORS["libraspec"]
    assert list(traces["chosen d = 6"].y) == [6, 6]
    assert list(traces[f"eps* = {min(eps)}"].y) == [min(eps)] * 2
    assert len(traces["q_i"].y) == 6
    table = next(t for t in fig.data if isinstance(t, go.Table))
    columns = table.cells.values
    assert len(columns) == 7 and all(len(c) == 2 for c in columns)  # two Algorithm 1 steps
    assert table.header.values[6] == "action" and list(columns[6]) == ["extend", "roll back"]
    # issue 45: the bars carry their numbers, and hovering one shows its worked line
    assert [int(t) for t in traces["eps_i"].text] == eps
    assert list(traces["eps_i"].customdata) == worked_bounds(list(row["confidences"])[:6], 2.2)
    assert traces["eps_i"].customdata[0].startswith("eps_1 = floor(2.2 * ")


def test_the_round_figure_shows_every_iteration_of_a_long_round():
    """Issue 45: the iteration table inside the eps figure showed 4 of 9 rows; the figure grows so the
    table's panel holds every row."""
    import dataclasses as dc

    from libraspec.analysis.stepper import ArrayBuffer
    from libraspec.policy import LibraSpecPolicy

    q = [0.95] * 20 + [0.3] * 20
    decision = LibraSpecPolicy(2.2, 40).choose_length(ArrayBuffer.revealing(q, 4, 1))
    row = {
        "mode": "libraspec",
        "chosen_length": decision.d,
        "eps_bounds": list(decision.eps_bounds),
        "confidences": q[: decision.d + 8],
        "policy_steps": [dc.asdict(step) for step in decision.steps],
        "round_index": 3,
        "alpha": 2.2,
        "draft_sources": (),
    }
    fig = plots.epsilon_figure(row, 2.2)
    steps = len(decision.steps)
    assert steps == 10 and fig.layout.height > plots.HEIGHTS["epsilon"]
    table = next(t for t in fig.data if isinstance(t, go.Table))
    plot_px = fig.layout.height - 140 - 58  # margins and the iterations' slider
    assert (table.domain.y[1] - table.domain.y[0]) * plot_px >= plots.TABLE_ROW_PX * (steps + 1)


def test_epsilon_figure_computes_bounds_for_modes_without_them(frame):
    row = frame[frame["mode"] == "static"].iloc[0]
    traces = _by_name(plots.epsilon_figure(row, alpha=2.2))
    q = list(row["confidences"])[:4]
    assert list(traces["eps_i"].y) == epsilon_bounds(q, 2.2).tolist()
    assert traces["eps_i"].marker.color == plots.MODE_COLORS["static"]


def test_epsilon_figure_reads_a_saved_trace(frame, tmp_path):
    loaded = read_trace(write_csv(frame, str(tmp_path / "trace.csv")))
    row = loaded[loaded["mode"] == "libraspec"].iloc[1]
    fig = plots.epsilon_figure(row, alpha=2.2)
    assert len(_by_name(fig)["eps_i"].y) == 3


def test_speedup_figure(frame):
    fig = plots.speedup_figure(frame, ar_seconds_per_token=0.06, ar_modeled_per_token=0.05)
    _assert_common(fig, "speedup")
    traces = _by_name(fig)
    modes = ("static", "libraspec", "oracle")
    assert set(traces) == {f"{m} {c}" for m in modes for c in ("measured", "modeled")}
    lib = frame[frame["mode"] == "libraspec"]
    measured = traces["libraspec measured"]
    assert list(measured.x) == lib["cumulative_tokens"].tolist()
    expected = [t * 0.06 / s for t, s in zip(lib["cumulative_tokens"], lib["cumulative_s"])]
    assert list(measured.y) == pytest.approx(expected)
    for name, trace in traces.items():
        assert trace.line.color == plots.MODE_COLORS[name.split()[0]]
        assert trace.line.dash == ("solid" if name.endswith("measured") else "dash")


def test_speedup_figure_without_ar_baseline_draws_only_modeled(frame):
    fig = plots.speedup_figure(frame, ar_seconds_per_token=None, ar_modeled_per_token=0.05)
    assert all(t.name.endswith("modeled") for t in fig.data) and len(fig.data) == 3


def test_profile_figure():
    profile = LatencyProfile.from_linear(0.05, 0.002, 0.03, n=N, max_tokens=25)
    fig = plots.profile_figure(profile)
    _assert_common(fig, "profile")
    verify, fit, draft = fig.data
    assert len(verify.x) == 25 and verify.y[0] == pytest.approx(52.0)
    assert list(fit.y) == pytest.approx([50.0 + 2.0 * k for k in range(1, 26)])
    assert list(draft.x) == list(range(1, len(profile.draft_s) + 1))
    # a run that verified 58 rows: the continuation beyond the measured 25 is drawn and marked
    wide = plots.profile_figure(profile, used_k=58)
    beyond = next(t for t in wide.data if t.name.startswith("extrapolated"))
    assert beyond.name == "extrapolated: k > 25 not measured" and (beyond.x[0], beyond.x[-1]) == (25, 58)
    assert beyond.y[-1] == pytest.approx(1000 * profile.verify_time(58))
    assert [shape.x0 for shape in wide.layout.shapes] == [25.5]
    assert wide.layout.xaxis.range[1] >= 58
    assert len(plots.profile_figure(profile, used_k=20).data) == 3  # within the measured range: nothing added
    # the legend sits below the axes, as every figure's: inside the plot area it covered the title (issue 45)
    legend = fig.layout.legend
    assert (legend.yref, legend.y, legend.yanchor, legend.orientation) == ("container", 0.0, "bottom", "h")


def test_profile_figure_draws_the_context_term():
    """The forwards timed after longer contexts as hollow markers, and the curve the model prices
    a run's longest context with, labelled modeled with the fit's error."""
    base = LatencyProfile.from_linear(0.05, 0.002, 0.03, n=N, max_tokens=25)
    fit = {"k": [1, 25], "median_ms": {"256": [52, 100], "2048": [70, 150]}, "max_relative_error": 0.018}
    profile = dataclasses.replace(
        base, context_len=256, context_k=(1, 25), context_slope_s=(1e-5, 2.8e-5), meta=base.meta | {"context_fit": fit}
    )
    fig = plots.profile_figure(profile, context=1256)
    timed = next(t for t in fig.data if t.name == "verify after 2,048 tokens (measured)")
    assert list(timed.x) == [1, 25] and list(timed.y) == [70, 150]
    curve = next(t for t in fig.data if t.name.startswith("after 1,256 tokens (modeled"))
    assert "within 2%" in curve.name
    assert curve.y[0] == pytest.approx(1000 * (base.verify_s[0] + 1000 * 1e-5))
    assert "timed after 256 tokens" in fig.layout.title.text
    assert len(plots.profile_figure(base, context=1256).data) == 3  # no context term: nothing added


def test_empty_frame_gives_placeholder_figures():
    """Each view of no records draws nothing and says why (the mode it was asked for included)."""
    empty = records_to_frame([])
    figures = {
        "no rounds yet": plots.length_figure(empty),
        "no drafted rounds for libraspec": plots.confidence_heatmap(empty),
        "no rounds or no AR baseline yet": plots.speedup_figure(empty, 0.06, 0.05),
    }
    for text, fig in figures.items():
        assert not fig.data and fig.layout.annotations[0].text == text


def test_epsilon_figure_of_a_tree_round_draws_the_trees_q():
    """Issue 34 defect 3: a tree mode's bars and q_i line both come from the tree's per-depth
    confidences (what its depth policy read); the chain's q_i drawn over them disagreed."""
    record = dataclasses.replace(_tree_round(), tree_confidences=(0.95, 0.6, 0.25))
    traces = _by_name(plots.epsilon_figure(dataclasses.asdict(record), alpha=2.2))
    line = traces["q_i (the tree's, per depth)"]
    assert list(line.y) == [0.95, 0.6, 0.25] and "q_i" not in traces
    assert list(traces["eps_i"].y) == epsilon_bounds([0.95, 0.6, 0.25], 2.2).tolist()


def _tree_round(k: int = 2, bonus: int | None = 67) -> RoundRecord:
    """A ddtree-libraspec round: root -> A (q .9) -> B (.5) -> H (.2) with siblings F, G; A and B accepted."""
    committed = (65, 66) + ((bonus,) if bonus is not None else ())
    return RoundRecord(
        mode="ddtree-libraspec",
        round_index=k,
        start_position=10,
        draft_tokens=(65, 66, 72, 0),
        confidences=(0.9, 0.5, 0.2, 0.1),
        blocks_drafted=1,
        policy_steps=(),
        eps_bounds=(),
        chosen_length=3,
        accepted=2,
        committed_tokens=committed,
        bonus_token=bonus,
        oracle_length=2,
        draft_s=0.01,
        policy_s=0.001,
        verify_s=0.05,
        modeled_s=0.05,
        cumulative_tokens=3 * (k + 1),
        cumulative_s=0.06 * (k + 1),
        cumulative_modeled_s=0.05 * (k + 1),
        tree_size=5,
        tree_tokens=(65, 70, 66, 71, 72),
        tree_parents=(-1, -1, 0, 0, 2),
        tree_probs=(0.9, 0.05, 0.5, 0.3, 0.2),
        tree_path=(0, 2),
        oracle_tree_size=3,
    )


def test_tree_layout_gives_leaves_their_own_rows_and_centres_parents():
    rows = plots.tree_layout([-1, -1, 0, 0, 2])  # nodes 0..4, then the root
    assert rows == [0.5, 2.0, 0.0, 1.0, 0.0, 1.25]
    assert plots.tree_layout([]) == [0.0] and plots.tree_layout(list(range(-1, 2999))) == [0.0] * 3001  # no recursion


@pytest.mark.parametrize("as_row", [False, True])
def test_tree_figure_draws_the_records_tree(as_row):
    record = _tree_round()
    shown = records_to_frame([record]).iloc[0] if as_row else record
    fig = plots.tree_figure(shown, chr, root_text="X")
    assert fig.layout.uirevision == "tree" and fig.layout.height >= plots.HEIGHTS["tree"]
    traces = _by_name(fig)
    nodes = traces["nodes (5)"]
    assert len(nodes.x) == record.tree_size and list(nodes.x) == [1, 1, 2, 2, 3]  # x = depth
    assert [t.split()[0] for t in nodes.text] == ["A", "F", "B", "G", "H"]  # decoded token, then q
    assert nodes.text[0] == "A 0.90" and nodes.customdata[4][4] == pytest.approx(0.9 * 0.5 * 0.2)  # path prob
    path = traces["accepted path (2)"]
    assert list(path.customdata) == list(record.tree_path) and list(path.x) == [0, 1, 2]
    assert path.line.color == plots.MODE_COLORS["ddtree-libraspec"]
    assert list(path.y[1:]) == [nodes.y[j] for j in record.tree_path]  # through the accepted nodes
    edges = traces["edges"]
    assert len(edges.x) == 3 * record.tree_size  # one segment per node, parent -> child
    bonus = traces["bonus (the target's token)"]
    assert bonus.text[-1] == "bonus C" and bonus.x[-1] == record.accepted + 1
    assert (bonus.x[0], bonus.y[0]) == (nodes.x[2], nodes.y[2])  # drawn from the last accepted node
    # a leaf row of its own, not over the rejected child H at the same depth
    assert bonus.y[-1] == int(bonus.y[-1]) and (bonus.x[-1], bonus.y[-1]) not in set(zip(nodes.x, nodes.y))
    assert traces["root (last committed token)"].text == ("X",)
    assert "5 nodes, depth 3, accepted 2" in fig.layout.title.text
    assert all(row[5] == "" for row in nodes.customdata)  # no rule's reasons given, none shown
    reasons = [f"rule {j}" for j in range(record.tree_size)]
    explained = _by_name(plots.tree_figure(shown, chr, "X", reasons))["nodes (5)"]
    assert [row[5] for row in explained.customdata] == [f"<br>entered: rule {j}" for j in range(5)]
    assert "%{customdata[5]}" in explained.hovertemplate


def test_tree_figure_without_a_bonus_and_for_a_chain_mode():
    assert "bonus (the target's token)" not in _by_name(plots.tree_figure(_tree_round(bonus=None)))
    chain = _round("static", 0, 4, 2, 1, [0.9] * N, 3)
    fig = plots.tree_figure(chain)
    assert not fig.data and "drafts a chain" in fig.layout.annotations[0].text


def test_tree_size_figure_per_round():
    records = [_tree_round(k) for k in range(3)]
    fig = plots.tree_size_figure(records_to_frame(records), "ddtree-libraspec")
    assert fig.layout.uirevision == "tree_sizes"
    traces = _by_name(fig)
    assert list(traces["tree size (nodes)"].y) == [r.tree_size for r in records]
    assert list(traces["accepted a"].y) == [r.accepted for r in records]
    assert list(traces["τ (a + bonus)"].y) == [r.tau for r in records]
    assert list(traces["oracle size"].y) == [r.oracle_tree_size for r in records]
    assert list(traces["tree size (nodes)"].x) == [0, 1, 2]
    assert traces["accepted a"].marker.color == plots.MODE_COLORS["ddtree-libraspec"]


def test_tree_size_figure_for_a_chain_mode_says_so(frame):
    fig = plots.tree_size_figure(frame, "static")
    assert not fig.data and "drafts a chain" in fig.layout.annotations[0].text


def test_epsilon_figure_steps_through_every_iteration():
    """Issue 34 defect 6: the inspector showed only the bounds at the submitted d, so its eps* (at
    the final d) differed from the table's last iteration and the steps 4 -> 5 -> ... could not be
    seen. A slider shows each iteration's bounds, whose minimum is that row's eps*."""
    from libraspec.analysis.stepper import ArrayBuffer
    from libraspec.policy import LibraSpecPolicy

    q = [1, 1, 1, 1, 1, 1, 0.5, 0.5, 0.25, 0, 0, 0]
    decision = LibraSpecPolicy(3.0, 12).choose_length(ArrayBuffer(q[:8], 4, more=q[8:]))
    assert [s.action for s in decision.steps] == ["extend", "extend", "extend", "stop"]
    record = dataclasses.replace(
        _tree_round(),
        mode="libraspec",
        confidences=tuple(q),
        chosen_length=decision.d,
        policy_steps=decision.steps,
        eps_bounds=decision.eps_bounds,
        alpha=3.0,
        tree_confidences=(),
    )
    fig = plots.epsilon_figure(dataclasses.asdict(record), alpha=1.0)  # the record's alpha wins
    slider = fig.layout.sliders[0]
    assert [p.label for p in slider.steps] == ["submitted d"] + [f"iteration {k}" for k in range(1, 5)]
    for k, step in enumerate(decision.steps, start=1):
        visible = slider.steps[k].args[0]["visible"]
        bars = [t for t, v in zip(fig.data, visible) if v and t.type == "bar"]
        assert len(bars) == 1 and list(bars[0].y) == epsilon_bounds(q[: step.d_before], 3.0).tolist()
        assert min(bars[0].y) == step.eps_star  # the table's row, drawn
    shown = slider.steps[0].args[0]["visible"]
    assert [t.name for t, v in zip(fig.data, shown) if v and t.type == "bar"] == ["eps_i"]
