"""The step-through replays exactly what LibraSpecPolicy decides (Algorithm 1), state by state."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from libraspec.analysis.stepper import ArrayBuffer, algorithm_states, parse_confidences, synthetic_confidences
from libraspec.cost import LatencyProfile
from libraspec.policy import LibraSpecPolicy, epsilon_bounds
from libraspec.views import tuning_plots

LAYER = "unit"  # tests/conftest.py


@st.composite
def cases(draw):
    n = draw(st.integers(1, 9))
    d_max = draw(st.integers(n, 40))
    blocks = -(-d_max // n)
    level = draw(st.sampled_from([0.0, 0.3, 0.7, 0.9, 0.99, 1.0]))
    q = draw(st.lists(st.one_of(st.floats(0.0, 1.0), st.just(level)), min_size=blocks * n, max_size=blocks * n))
    alpha = draw(st.one_of(st.floats(0.05, 8.0), st.sampled_from([1.0, 2.0, 2.2, 3.0])))
    initial = draw(st.integers(1, blocks))
    return np.array(q), n, alpha, d_max, initial


@settings(max_examples=400, deadline=None)
@given(cases())
def test_every_decision_equals_libraspec_policy(case):
    q, n, alpha, d_max, initial = case
    policy = LibraSpecPolicy(alpha, d_max)
    buffer = ArrayBuffer.revealing(q, n, initial_blocks=initial)
    decision = policy.choose_length(buffer)
    d = decision.d
    states = algorithm_states(q, n, alpha, d_max, initial_blocks=initial)
    assert states[-1].d == d
    assert tuple(s.step for s in states[1:]) == decision.steps  # same iterations, same B, same drafting
    assert states[-1].blocks * n == len(buffer.confidences)
    assert [s.done for s in states] == [False] * (len(states) - 1) + [True]
    for prev, state in zip(states, states[1:]):
        assert state.step.d_before == prev.d
        assert state.eps == tuple(epsilon_bounds(q[: prev.d], alpha).tolist())
        assert state.eps_star == min(state.eps) and state.eps[state.argmin - 1] == state.eps_star
        assert state.budget == state.blocks * n - state.d  # B = drafted - d throughout
        assert state.message.startswith(f"Iteration {state.index}:")


def test_a_worked_example_extends_then_stops():
    q = [0.95] * 6 + [0.2] * 6  # confident first block, weak second
    states = algorithm_states(q, n=3, alpha=2.0, d_max=12)
    reasons = [s.reason for s in states]
    assert reasons[0] == "start" and reasons[-1] in ("stop", "cap")
    assert "extend" in reasons
    extend = next(s for s in states if s.reason == "extend")
    assert "beneficial" in extend.message and f"-> {extend.d}" in extend.message
    last = states[-1]
    assert last.reason == "stop" and "at or below d" in last.message
    assert states[-1].d == LibraSpecPolicy(2.0, 12).choose_length(ArrayBuffer.revealing(q, 3)).d


def test_d_max_equal_to_n_never_loops():
    states = algorithm_states([0.9] * 4, n=4, alpha=2.2, d_max=4)
    assert len(states) == 1 and states[0].done and states[0].d == 4 and "never runs" in states[0].message


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(q=[0.5] * 8, n=4, alpha=2.0, d_max=12), "every position up to d_max"),
        (dict(q=[0.5] * 8, n=9, alpha=2.0, d_max=8), "d_max >= n"),
        (dict(q=[0.5] * 8, n=4, alpha=-1.0, d_max=8), "alpha"),
        (dict(q=[0.5] * 7 + [1.5], n=4, alpha=2.0, d_max=8), "within"),
    ],
)
def test_bad_input_is_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        algorithm_states(**kwargs)


def test_synthetic_profile_and_parsing():
    q = synthetic_confidences(30, start=0.9, decay=0.05, noise=0.0, seed=0)
    assert q.shape == (30,) and q[0] == pytest.approx(0.9) and np.all(np.diff(q) < 0)
    noisy = synthetic_confidences(30, 0.9, 0.05, 0.3, seed=1)
    assert noisy.min() >= 0 and noisy.max() <= 1
    assert np.array_equal(noisy, synthetic_confidences(30, 0.9, 0.05, 0.3, seed=1))
    assert parse_confidences("0.9, 0.8;0.7\n[0.5 1]").tolist() == [0.9, 0.8, 0.7, 0.5, 1.0]
    with pytest.raises(ValueError, match="not a number"):
        parse_confidences("0.9, x")
    with pytest.raises(ValueError, match="within"):
        parse_confidences("0.9, 1.2")
    with pytest.raises(ValueError, match="decay"):
        synthetic_confidences(5, 0.9, 1.5, 0.0, 0)


def test_step_figures_show_the_state():
    q = synthetic_confidences(24, 0.97, 0.02, 0.0, 0)
    states = algorithm_states(q, n=8, alpha=2.2, d_max=24)
    fig = tuning_plots.stepper_figure(states, len(states) - 1, q, d_max=24)
    names = [t.name for t in fig.data]
    assert "eps_i" in names and "q_i" in names
    bars = next(t for t in fig.data if t.name == "eps_i")
    assert list(bars.y) == list(states[-1].eps)
    profile = LatencyProfile.from_linear(0.02, 0.001, 0.005, 8, 25)
    curve = tuning_plots.expected_speedup_figure(q, profile, 24, libraspec_d=states[-1].d, static_length=8)
    line = next(t for t in curve.data if t.name == "E[eta_d]")
    assert len(line.y) == 24 and all(v > 0 for v in line.y)
    marks = {t.name.split(" ")[0] for t in curve.data if t.mode == "markers"}
    assert {"LibraSpec", "argmax", "static"} <= marks


@pytest.mark.app  # imports ui/
def test_teach_tab_views_every_source():
    from types import SimpleNamespace

    from test_calibration import record

    from libraspec.spec import RunSpec
    from ui.stepthrough import Inputs, confidences_for, race_round_settings, step_view

    index, step_fig, curve_fig, text = step_view(Inputs(), 10**6, None)
    assert text.startswith(f"**Step {index} of {index}.**") and "exhaustive argmax" in text
    bars = step_fig.data[0]  # issue 45: the bars carry their numbers and each its worked line on hover
    assert [int(t) for t in bars.text] == list(bars.y) and bars.customdata[0].startswith("eps_1 = floor(2.2 * ")
    source = confidences_for(Inputs(source="pasted list", pasted="0.9 0.8 0.7 0.6 0.5", n=2), None)
    assert (source.n, source.d_max) == (2, 5) and source.notes == (
        "Corrected: d_max 24 -> 5 (allowed 2..5): only 5 confidences are known.",
    )
    raised = confidences_for(Inputs(source="pasted list", pasted="0.9 0.8 0.7 0.6 0.5", n=5, d_max=3), None)
    assert raised.d_max == 5 and raised.notes == ("Corrected: d_max 3 -> 5 (allowed 5..5).",)  # raised to n
    # exactly n pasted values: one state, said so (issue 45: it read "Step 0 of 0"), and how to see the loop
    _, _, _, only = step_view(Inputs(source="pasted list", pasted="0.9 0.8 0.7 0.6 0.5", n=5), 0, None)
    assert "Step 0 of 0" not in only and only.startswith("**The only state") and "Paste more than n = 5" in only
    many = confidences_for(Inputs(source="pasted list", pasted=" ".join(["0.9"] * 70), n=7, d_max=80), None)
    assert many.d_max == 64 and many.notes == ("Corrected: d_max 80 -> 64 (allowed 7..64).",)  # the app's cap
    with pytest.raises(ValueError, match="no race yet"):
        confidences_for(Inputs(source="last race round"), [])
    run = SimpleNamespace(
        prompt="Hi",
        drafter="dflash",
        n=12,
        settings=RunSpec(alpha=3.0, d_max=24),
        records={"libraspec": [record("libraspec", 0, [0.9] * 6 + [0.5] * 6, d=8, accepted=3)]},
    )
    # issue 34 defect 8: the sliders showed 2.2 and n 8 while the replay used the race's 8 and 7;
    # choosing the round now sets them to the race's values, and the replay uses what they show
    inputs = Inputs(source="last race round", round_index=5, alpha=1.0, d_max=7)
    assert race_round_settings(inputs, [run]) == (3.0, 12, 24)
    adopted = dataclasses.replace(inputs, alpha=3.0, n=12, d_max=24)
    source = confidences_for(adopted, [run])
    assert (source.n, source.d_max, source.alpha, len(source.q)) == (12, 24, 3.0, 12)  # as the race ran it
    assert list(source.padded[12:]) == [0.0] * 12 and "replayed with" not in source.notes[0]
    moved = confidences_for(dataclasses.replace(adopted, alpha=1.0), [run])
    assert moved.alpha == 1.0 and moved.n == 12 and "replayed with the sliders' alpha = 1" in moved.notes[0]
    # issue 45: a prompt that is a numbered list with underscores stays text in the note (it became a
    # Markdown list and the note's _..._ emphasis broke, showing literal underscores)
    listed = SimpleNamespace(**{**vars(run), "prompt": "List:\n1. Mercury\n2. Venus_b *bold*"})
    _, _, _, text = step_view(adopted, 0, [listed])
    note = [line for line in text.splitlines() if "Replay of LibraSpec round" in line]
    assert len(note) == 1 and note[0].startswith("<em>") and note[0].endswith("</em>")
    assert "(&quot;List: 1. Mercury 2. Venus\\_b \\*bold\\*&quot;)" in note[0]
    # issue 34 defect 8: the speedup curve defaults to this machine's measured profile; before a model
    # is loaded the linear cost stands in and the text says so (it used to default to 20 + 1 k ms)
    assert Inputs().cost == "measured profile"
    assert "the linear cost stands in" in step_view(Inputs(), 0, None)[3]


@pytest.mark.app  # imports ui/
def test_teach_tab_measured_profile_takes_the_step_n():
    from ui.stepthrough import Inputs, cost_profile

    measured = LatencyProfile.from_linear(0.02, 0.001, 0.005, 7, 25, meta={"pair": "tiny-llama"})
    profile, note = cost_profile(Inputs(cost="measured profile"), 8, 24, measured)
    assert profile.n == 8 and profile.verify_s == measured.verify_s
    assert "tiny-llama" in note and "n = 7" in note
    linear, _ = cost_profile(Inputs(t0_ms=10.0, c_ms=2.0, draft_ms=0.0), 8, 24, None)
    assert linear.verify_time(3) == pytest.approx(0.016) and linear.round_time(9) > linear.round_time(8)
    with pytest.raises(ValueError, match="cannot be free"):
        cost_profile(Inputs(t0_ms=0.0, c_ms=0.0), 8, 24, None)


def test_the_step_through_checks_its_sliders_as_a_race_does():
    """alpha and d_max of the step-through go through check_settings: clamped, each change noted."""
    from ui.stepthrough import Inputs, confidences_for

    source = confidences_for(Inputs(alpha=100.0, d_max=2, n=8), None)
    assert (source.alpha, source.d_max) == (64.0, 8)
    assert source.notes == (
        "Corrected: alpha 100 -> 64 (allowed 0.05..64).",
        "Corrected: d_max 2 -> 8 (allowed 8..64).",
    )


def test_the_algorithm_steps_api_walks_pasted_confidences_with_checked_knobs():
    """`/algorithm_steps` (ui.stepthrough.pasted_states): every state of Algorithm 1 as a dict, the
    same decisions as LibraSpecPolicy, alpha clamped as the sliders clamp it (999 -> 64)."""
    from ui.stepthrough import pasted_states

    q = "0.9, 0.9, 0.9, 0.9, 0.8, 0.8, 0.8, 0.8, 0.2, 0.2, 0.2, 0.2"
    states = pasted_states(q, 4, 999, 12)
    decision = LibraSpecPolicy(64.0, 12).choose_length(ArrayBuffer(parse_confidences(q), 4))
    assert states[-1]["d"] == decision.d and len(states) == len(decision.steps) + 1
    assert set(states[0]) == {"index", "d", "budget", "blocks", "eps", "eps_star", "reason", "message"}
    assert (
        pasted_states(q, 4, 2.2, 12)[-1]["d"]
        == LibraSpecPolicy(2.2, 12).choose_length(ArrayBuffer(parse_confidences(q), 4)).d
    )
    # n beyond the largest d_max the app allows (64): refused with the reason, not a failed assert
    with pytest.raises(ValueError, match="n must be within 1..64, got 100"):
        pasted_states(", ".join(["0.9"] * 120), 100, 2.2, 120)
    assert len(pasted_states(", ".join(["0.9"] * 70), 64, 2.2, 200)[-1]["eps"]) >= 1  # d_max 200 -> 64


@pytest.mark.app  # imports ui/
def test_refused_pasted_confidences_clear_the_figures_and_say_why_once():
    """Issue 45: refused pasted confidences left the old round on screen and raised a toast on every
    keystroke. The view now empties both figures and says why in the text, and raises nothing."""
    from types import SimpleNamespace

    from ui.stepthrough import Inputs
    from ui.teach_tab import TeachTab

    tab = TeachTab.__new__(TeachTab)
    tab.session = SimpleNamespace(profile=lambda: None, races=SimpleNamespace(runs=lambda owner: []))
    request = SimpleNamespace(session_hash="teacher")
    good = dataclasses.replace(Inputs(), source="pasted list", pasted="0.9 0.8 0.7 0.6 0.5 0.4 0.3 0.2 0.1")
    index, step_fig, _, text = tab.restart(request, 0, *dataclasses.astuple(good))
    assert text.startswith("**Step") and len(step_fig.data) > 0
    for pasted, why in (("0.9 abc", "confidence"), ("0.9 1.7 0.5", "[0, 1]"), ("0.9", "at least one block")):
        bad = dataclasses.replace(good, pasted=pasted)
        index, step_fig, curve_fig, text = tab.restart(request, 3, *dataclasses.astuple(bad))
        assert index == 0 and text.startswith("**⚠ Not shown:**") and why in text, (pasted, text)
        assert len(step_fig.data) == len(curve_fig.data) == 0  # no earlier round left beside the message


@pytest.mark.app  # imports ui/
def test_the_step_through_shows_only_the_controls_its_source_and_cost_read():
    """Issue 45: unused sliders pushed the plot below the fold. Synthetic confidences show their four
    knobs, a race round its round number, a pasted list its box; the linear cost's three sliders show
    only under the linear cost. The built tab starts that way for its defaults."""
    import gradio as gr

    from ui.stepthrough import COSTS, SOURCES, Inputs
    from ui.teach_tab import TeachTab

    shown = {s: [u["visible"] for u in TeachTab.source_controls(s)] for s in SOURCES}
    assert shown == {
        "synthetic": [True, True, True, True, False, False],
        "last race round": [False, False, False, False, True, False],
        "pasted list": [False, False, False, False, False, True],
    }
    assert [u["visible"] for u in TeachTab.cost_controls(COSTS[0])] == [False] * 3
    assert [u["visible"] for u in TeachTab.cost_controls(COSTS[1])] == [True] * 3
    tab = TeachTab(session=None)
    with gr.Blocks():
        tab.build()
    defaults = Inputs()
    assert [c.visible for c in tab._source_controls()] == shown[defaults.source]
    assert [c.visible for c in tab._cost_controls()] == [defaults.cost == COSTS[1]] * 3
