"""Tests for libraspec.policy: eps_i bounds, Algorithm 1, and the comparison policies."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from libraspec.analysis.stepper import ArrayBuffer
from libraspec.modes import make_policy
from libraspec.policy import FailFastPolicy, G4Policy, LengthPolicy, LibraSpecPolicy, StaticPolicy, epsilon_bounds
from libraspec.records import PolicyStep, RoundRecord, step_action
from libraspec.tree_policy import TreePolicy

LAYER = "unit"  # tests/conftest.py


def naive_eps(q, alpha):
    """eps_i straight from Algorithm 1 line 6: a double sum of products, O(d^2)."""
    d = len(q)
    out = []
    for i in range(1, d + 1):
        s = sum(math.prod(q[i - 1 : j]) for j in range(i, d + 1))
        out.append(math.floor(alpha * s + i + 1e-9))
    return out


def naive_libraspec(q_all, n, alpha, d_max, start=None):
    """Algorithm 1 with naive bounds; returns (d, tokens drafted), from one drafted block (and the
    blocks that reach `start`, d's first value, n when None)."""
    d = n if start is None else start
    drafted = max(1, math.ceil(d / n)) * n
    budget = drafted - d
    while d < d_max:
        eps_star = min(naive_eps(list(q_all[:d]), alpha))
        if eps_star <= d:
            return eps_star, drafted
        d_new = min(eps_star, d_max)
        budget -= d_new - d
        d = d_new
        if budget < 0:
            blocks = math.ceil(-budget / n)
            drafted += blocks * n
            budget += blocks * n
    return d, drafted


def record(chosen, accepted):
    return RoundRecord(
        mode="g4",
        round_index=0,
        start_position=0,
        draft_tokens=(),
        confidences=(),
        blocks_drafted=1,
        policy_steps=(),
        eps_bounds=(),
        chosen_length=chosen,
        accepted=accepted,
        committed_tokens=(0,) * (accepted + 1),
        bonus_token=0,
        oracle_length=None,
        draft_s=0.0,
        policy_s=0.0,
        verify_s=0.0,
        modeled_s=0.0,
        cumulative_tokens=accepted + 1,
        cumulative_s=0.0,
        cumulative_modeled_s=0.0,
    )


def stream(q_all, n, blocks=1):
    return ArrayBuffer.revealing(q_all, n, blocks)


# ---- worked examples -------------------------------------------------------------


def test_worked_example_extend_then_rollback():
    # n = 4, alpha = 2, d_max = 12; blocks q = [1, 1, .75, .5 | .5, .5, 0, 0 | 0, 0, 0, 0].
    # Line 4: d = 4, B = 0.
    # Iteration 1 over q_1..q_4 = [1, 1, .75, .5]:
    #   S_4 = .5; S_3 = .75 * 1.5 = 1.125; S_2 = 1 * 2.125 = 2.125; S_1 = 3.125
    #   eps_1 = floor(6.25 + 1) = 7, eps_2 = floor(4.25 + 2) = 6,
    #   eps_3 = floor(2.25 + 3) = 5, eps_4 = floor(1 + 4) = 5  -> eps* = 5 > d = 4
    #   d' = min(5, 12) = 5, B = 0 - 1 = -1 < 0 -> draft ceil(1/4) = 1 block, B = 3; d = 5
    # Iteration 2 over q_1..q_5 = [1, 1, .75, .5, .5]:
    #   S_5 = .5; S_4 = .5 * 1.5 = .75; S_3 = .75 * 1.75 = 1.3125; S_2 = 2.3125; S_1 = 3.3125
    #   eps_5 = floor(1 + 5) = 6, eps_4 = floor(1.5 + 4) = 5, eps_3 = floor(2.625 + 3) = 5,
    #   eps_2 = floor(4.625 + 2) = 6, eps_1 = floor(6.625 + 1) = 7 -> eps* = 5 <= 5: rollback
    # Final d = 5; 2 blocks (8 tokens) drafted, one extend call.
    buf = stream([1, 1, 0.75, 0.5, 0.5, 0.5, 0, 0, 0, 0, 0, 0], 4)
    assert epsilon_bounds([1, 1, 0.75, 0.5], 2.0).tolist() == [7, 6, 5, 5]
    assert epsilon_bounds([1, 1, 0.75, 0.5, 0.5], 2.0).tolist() == [7, 6, 5, 5, 6]
    policy = LibraSpecPolicy(2.0, 12)
    decision = policy.choose_length(buf)
    assert decision.d == 5
    assert decision.steps == (PolicyStep(4, 5, 5, 3, 1, False), PolicyStep(5, 5, 5, 3, 0, True))
    assert len(buf.confidences) == 8 and buf.extend_calls == 1 and buf.blocks_extended == 1


def test_iterations_speak_one_vocabulary():
    """extend / roll back / stop (issue 34): eps* = d ends the loop with d unchanged, a stop, which
    the views used to call a rollback; eps* < d is the rollback."""
    decision = LibraSpecPolicy(2.0, 12).choose_length(stream([1, 1, 0.75, 0.5, 0.5, 0.5, 0, 0, 0, 0, 0, 0], 4))
    assert [s.action for s in decision.steps] == ["extend", "stop"]  # the worked example above
    low = LibraSpecPolicy(1.0, 12).choose_length(stream([0.1] * 4, 4))  # eps_i = i: eps* = 1 < d = 4
    assert [(s.d_before, s.eps_star, s.d_after, s.action) for s in low.steps] == [(4, 1, 1, "roll back")]
    assert step_action(4, 7, False) == "extend" and step_action(5, 5, True) == "stop"


def test_worked_example_all_confident_grows_to_d_max():
    # n = 4, alpha = 1.5, d_max = 10, every q = 1, so S_i = d - i + 1 and
    # eps_i = floor(1.5 (d - i + 1) + i), smallest at i = d: floor(1.5 + d) = d + 1.
    # d = 4: S = (4, 3, 2, 1), eps = (7, 6, 6, 5), eps* = 5; B = 0 - 1 = -1 -> 1 block, B = 3
    # d = 5: S = (5, 4, 3, 2, 1), eps = (8, 8, 7, 7, 6), eps* = 6; B = 2
    # d = 6: eps* = 7; B = 1.   d = 7: eps* = 8; B = 0.
    # d = 8: eps* = 9; B = -1 -> 1 block, B = 3.   d = 9: eps* = 10 = d_max; B = 2; loop ends.
    # Final d = 10; 3 blocks (12 tokens) drafted in two extend calls.
    buf = stream(np.ones(12), 4)
    assert epsilon_bounds(np.ones(5), 1.5).tolist() == [8, 8, 7, 7, 6]
    policy = LibraSpecPolicy(1.5, 10)
    decision = policy.choose_length(buf)
    assert decision.d == 10
    assert [(s.d_before, s.eps_star, s.budget, s.blocks_requested) for s in decision.steps] == [
        (4, 5, 3, 1),
        (5, 6, 2, 0),
        (6, 7, 1, 0),
        (7, 8, 0, 0),
        (8, 9, 3, 1),
        (9, 10, 2, 0),
    ]
    assert len(buf.confidences) == 12 and buf.extend_calls == 2


def test_worked_example_budget_from_blocks_drafted_ahead():
    # n = 4, alpha = 3, d_max = 12, two blocks already drafted, so B starts at 8 - 4 = 4.
    # q = [1, 1, 1, 1 | 1, 1, .5, .5 | .25, 0, 0, 0].
    # d = 4: S = (4, 3, 2, 1), eps = floor(3 S_i + i) = (13, 11, 9, 7), eps* = 7;
    #   B = 4 - 3 = 1 >= 0, no drafting; d = 7.
    # d = 7: S_7 = .5, S_6 = 1.5, S_5 = 2.5, ..., S_1 = 6.5;
    #   eps = (20, 18, 16, 14, 12, 10, 8), eps* = 8 (i = 7: floor(1.5 + 7)); B = 0; d = 8.
    # d = 8: S_8 = .5, S_7 = .5 * 1.5 = .75, S_6 = 1.75, ..., S_1 = 6.75;
    #   eps_8 = floor(1.5 + 8) = 9, eps_7 = floor(2.25 + 7) = 9, others larger: eps* = 9;
    #   B = 0 - 1 = -1 -> 1 block, B = 3; d = 9.
    # d = 9: S_9 = .25, S_8 = .5 * 1.25 = .625, S_7 = .8125, ...;
    #   eps_9 = floor(.75 + 9) = 9, eps_8 = floor(1.875 + 8) = 9 -> eps* = 9 <= 9: rollback.
    # Final d = 9; 3 blocks drafted, one of them by the policy.
    buf = stream([1, 1, 1, 1, 1, 1, 0.5, 0.5, 0.25, 0, 0, 0], 4, blocks=2)
    policy = LibraSpecPolicy(3.0, 12)
    decision = policy.choose_length(buf)
    assert decision.d == 9
    assert [(s.d_before, s.eps_star, s.d_after, s.budget, s.blocks_requested, s.rollback) for s in decision.steps] == [
        (4, 7, 7, 1, 0, False),
        (7, 8, 8, 0, 0, False),
        (8, 9, 9, 3, 1, False),
        (9, 9, 9, 3, 0, True),
    ]
    assert buf.blocks_extended == 1 and len(buf.confidences) == 12


def test_worked_example_all_zero_rolls_back_to_one():
    # q = 0 everywhere: S_i = 0, eps_i = floor(0 + i) = i, eps* = eps_1 = 1 <= d = 4: d = 1.
    buf = stream(np.zeros(8), 4)
    policy = LibraSpecPolicy(2.2, 8)
    decision = policy.choose_length(buf)
    assert decision.d == 1
    assert decision.steps == (PolicyStep(4, 1, 1, 3, 0, True),)
    assert buf.extend_calls == 0


def test_worked_example_a_start_past_the_first_block():
    # n = 4, alpha = 2, d_max = 12, start = 6: blocks 1 and 2 are drafted first, d = 6, B = 8 - 6 = 2.
    # q = [1, 1, .75, .5 | .5, .5, 0, 0 | 0 ...]: over q_1..q_6, S_6 = .5, S_5 = .75, S_4 = .875,
    #   S_3 = 1.40625, S_2 = 2.40625, S_1 = 3.40625: eps = (7, 6, 5, 5, 6, 7), eps* = 5 <= 6: roll back to 5.
    buf = stream([1, 1, 0.75, 0.5, 0.5, 0.5, 0, 0, 0, 0, 0, 0], 4)
    decision = LibraSpecPolicy(2.0, 12, start=6).choose_length(buf)
    assert decision.d == 5 and decision.steps == (PolicyStep(6, 5, 5, 3, 0, True),)
    assert len(buf.confidences) == 8 and buf.extend_calls == 1
    # a start below n leaves the rest of the block as budget: start 2, B = 2; eps* over q_1, q_2 = 1, 1
    # is floor(2 * 1 + 2) = 4 (i = 2); d = 4 uses the budget, no block is drafted
    buf = stream([1, 1, 0.75, 0.5, 0.5, 0.5, 0, 0], 4)
    decision = LibraSpecPolicy(2.0, 12, start=2).choose_length(buf)
    assert decision.steps[0] == PolicyStep(2, 4, 4, 0, 0, False) and decision.d == 5
    with pytest.raises(ValueError, match="start 13 exceeds d_max 12"):
        LibraSpecPolicy(2.0, 12, start=13)


# ---- properties ------------------------------------------------------------------

probs = st.floats(0.0, 1.0, allow_nan=False)
alphas = st.floats(0.05, 8.0, allow_nan=False)


@settings(deadline=None)
@given(st.lists(probs, min_size=1, max_size=40), alphas)
def test_recursion_equals_naive_double_sum(q, alpha):
    eps = epsilon_bounds(q, alpha)
    assert eps.dtype == np.int64 and eps.shape == (len(q),)
    assert eps.tolist() == naive_eps(q, alpha)
    assert np.all(eps >= np.arange(1, len(q) + 1))  # eps_i >= i since S_i >= 0


@st.composite
def rounds(draw):
    n = draw(st.integers(1, 8))
    d_max = draw(st.integers(n, 40))
    blocks = -(-d_max // n) + 1
    q = draw(st.lists(probs, min_size=blocks * n, max_size=blocks * n))
    return np.array(q), n, draw(alphas), d_max


@settings(max_examples=200, deadline=None)
@given(rounds())
def test_libraspec_invariants(case):
    q, n, alpha, d_max = case
    buf = stream(q, n)
    policy = LibraSpecPolicy(alpha, d_max)
    decision = policy.choose_length(buf)
    d = decision.d
    assert 1 <= d <= d_max
    assert (d, len(buf.confidences)) == naive_libraspec(q, n, alpha, d_max)
    visited = [n] + [s.d_after for s in decision.steps]
    assert visited[-1] == d
    drafted = len(buf.confidences)
    # minimal drafting: enough for every d visited, never a block past the largest
    assert drafted >= max(visited) and drafted < max(visited) + n
    for step in decision.steps:
        assert step.budget >= 0
        if step.blocks_requested:
            assert step.budget < n  # blocks only when the budget was exhausted
    assert sum(s.rollback for s in decision.steps) <= 1


@settings(max_examples=100, deadline=None)
@given(rounds(), st.integers(1, 40))
def test_libraspec_from_any_start_is_algorithm_1_from_there(case, start):
    q, n, alpha, d_max = case
    start = min(start, d_max)
    buf = stream(q, n)
    decision = LibraSpecPolicy(alpha, d_max, start=start).choose_length(buf)
    assert 1 <= decision.d <= d_max and sum(s.rollback for s in decision.steps) <= 1
    assert (decision.d, len(buf.confidences)) == naive_libraspec(q, n, alpha, d_max, start)
    assert all(step.budget >= 0 for step in decision.steps)
    as_written = LibraSpecPolicy(alpha, d_max).choose_length(stream(q, n))
    assert LibraSpecPolicy(alpha, d_max, start=n).choose_length(stream(q, n)) == as_written  # start n


@settings(deadline=None)
@given(st.integers(1, 8), st.integers(0, 30), st.floats(1.0, 6.0))
def test_all_confident_reaches_d_max(n, extra, alpha):
    # all q = 1: eps_i = floor(alpha (d - i + 1) + i) >= floor(alpha + d) >= d + 1 for alpha >= 1
    d_max = n + extra
    policy = LibraSpecPolicy(alpha, d_max)
    decision = policy.choose_length(stream(np.ones(-(-d_max // n) * n), n))
    assert decision.d == d_max


@settings(deadline=None)
@given(st.integers(1, 8), st.integers(1, 30), st.floats(0.01, 0.99))
def test_all_confident_small_alpha_rolls_back(n, extra, alpha):
    # alpha < 1: alpha (d - i + 1) + i = alpha (d + 1) + (1 - alpha) i is smallest at i = 1,
    # eps* = floor(alpha d + 1) <= d, so the first iteration rolls back to floor(alpha n + 1)
    policy = LibraSpecPolicy(alpha, n + extra)
    decision = policy.choose_length(stream(np.ones(n), n))
    assert decision.d == math.floor(alpha * n + 1 + 1e-9)


@settings(deadline=None)
@given(st.integers(1, 8), st.integers(1, 30), alphas)
def test_all_zero_gives_one(n, extra, alpha):
    policy = LibraSpecPolicy(alpha, n + extra)  # d_max > n, so the loop runs
    decision = policy.choose_length(stream(np.zeros(n), n))
    assert decision.d == 1


def test_d_max_equal_n_skips_the_loop():
    policy = LibraSpecPolicy(2.0, 4)
    decision = policy.choose_length(stream(np.zeros(4), 4))
    assert decision.d == 4 and decision.steps == ()


# ---- comparison policies ---------------------------------------------------------


def test_static_policy_extends_as_needed():
    buf = stream(np.full(12, 0.5), 4)
    policy = StaticPolicy(7)
    decision = policy.choose_length(buf)
    assert decision.d == 7 and len(buf.confidences) == 8
    assert policy.d_max == 7 and decision.steps == ()


def test_g4_policy_schedule():
    policy = G4Policy(3, 6)
    buf = stream(np.full(8, 0.9), 4)
    decision = policy.choose_length(buf)
    assert decision.d == 3
    policy.update(record(3, 3))  # fully accepted: +2
    decision = policy.choose_length(buf)
    assert decision.d == 5 and len(buf.confidences) == 8
    policy.update(record(5, 5))  # +2, capped at d_max = 6
    assert policy.length == 6
    for _ in range(10):
        policy.update(record(policy.length, 0))  # -1 each, floored at 1
    assert policy.length == 1
    policy.reset()
    assert policy.length == 3


def test_failfast_policy():
    q = [0.9, 0.9, 0.9, 0.9, 0.9, 0.3, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9]
    buf = stream(q, 4)
    # d = 2 (all >= .5), d = 4 (all >= .5), d = 6 (q_6 = .3 < .5): stop at 6
    assert FailFastPolicy(0.5, 2, 12).choose_length(buf).d == 6 and len(buf.confidences) == 8
    assert FailFastPolicy(0.2, 5, 12).choose_length(stream(q, 4)).d == 12  # 5, 10, 12 = d_max
    assert FailFastPolicy(0.95, 3, 12).choose_length(stream(q, 4)).d == 3


def test_make_policy_and_protocol():
    for name in ("static", "libraspec", "g4", "failfast"):
        policy = make_policy(name, 15, alpha=2.0, d_max=24)
        assert isinstance(policy, LengthPolicy) and policy.name == name
        decision = policy.choose_length(stream(np.full(30, 0.8), 15))
        d = decision.d
        assert 1 <= d <= policy.d_max
    tree = make_policy("ddtree", 15)  # a tree mode: a depth policy and a node budget
    assert isinstance(tree, TreePolicy) and isinstance(tree, LengthPolicy)
    assert (tree.depth_policy.name, tree.d_max, tree.node_budget) == ("static", 15, 32)
    tree = make_policy("ddtree", 15, tree_depth=30, node_budget=4)
    assert (tree.d_max, tree.node_budget) == (30, 4)
    tree = make_policy("ddtree-libraspec", 15, alpha=3.0, d_max=40, node_budget=64)
    assert (tree.depth_policy.name, tree.depth_policy.alpha, tree.d_max, tree.node_budget) == ("libraspec", 3.0, 40, 64)
    assert tree.choose_length(stream(np.full(30, 0.8), 15)) == LibraSpecPolicy(3.0, 40).choose_length(
        stream(np.full(30, 0.8), 15)
    )
    with pytest.raises(ValueError, match="unknown mode"):
        make_policy("turbo", 15)


# ---- bad input -------------------------------------------------------------------


@pytest.mark.parametrize("q", [[0.5, 1.2], [-0.1], [np.nan], [np.inf], [], [[0.5]]])
def test_bad_confidences(q):
    with pytest.raises(ValueError, match="confidences"):
        epsilon_bounds(q, 2.0)


@pytest.mark.parametrize("alpha", [0.0, -1.0, np.nan, np.inf, "2"])
def test_bad_alpha(alpha):
    with pytest.raises(ValueError, match="alpha"):
        epsilon_bounds([0.5], alpha)
    with pytest.raises(ValueError, match="alpha"):
        LibraSpecPolicy(alpha, 24)


def test_bad_policy_arguments():
    with pytest.raises(ValueError, match="d_max >= n"):
        LibraSpecPolicy(2.0, 3).choose_length(stream(np.ones(4), 4))
    with pytest.raises(ValueError, match="d_max"):
        LibraSpecPolicy(2.0, 0)
    with pytest.raises(ValueError, match="static length"):
        StaticPolicy(0)
    with pytest.raises(ValueError, match="exceeds d_max"):
        G4Policy(5, 4)
    with pytest.raises(ValueError, match="threshold"):
        FailFastPolicy(1.5, 2, 8)
    with pytest.raises(ValueError, match="empty"):
        LibraSpecPolicy(2.0, 8).choose_length(ArrayBuffer([], 4, np.ones(8)))
    with pytest.raises(ValueError, match="confidences"):
        LibraSpecPolicy(2.0, 8).choose_length(ArrayBuffer([0.5, 0.5, 2.0, 0.5], 4))


def test_array_buffer_refuses_to_draft_past_its_end():
    buf = stream(np.ones(8), 4)
    buf.extend(1)
    with pytest.raises(ValueError, match="cannot draft"):
        buf.extend(1)
    with pytest.raises(ValueError, match="whole blocks"):
        ArrayBuffer([0.5] * 3, 4)


def test_the_mode_registry_carries_each_modes_presentation_and_knobs():
    """Titles, labels and colours come from one place (`modes.MODES`), distinct per mode; each
    mode's knobs are fields of RunSpec, and a knob changes the policy a mode builds
    exactly when the mode lists it (a mode that read an unlisted knob, or listed an unread one,
    would mislabel the app's history table)."""
    import dataclasses

    from libraspec.cost import LatencyProfile
    from libraspec.modes import MODES
    from libraspec.spec import RunSpec

    fields = {f.name for f in dataclasses.fields(RunSpec)}
    for key in ("label", "title", "colour"):
        values = [getattr(m, key) for m in MODES.values()]
        assert len(set(values)) == len(values), key
    profile = LatencyProfile.from_linear(0.02, 0.001, 0.005, 7, 40)
    base = RunSpec(alpha=2.2, d_max=20, static_length=5, g4_initial=6, tree_depth=5, node_budget=12)
    changed = dict(
        alpha=5.0, d_max=30, static_length=9, g4_initial=9, failfast_threshold=0.3, failfast_step=2, tree_depth=9
    ) | {"node_budget": 20}
    for name, mode in MODES.items():
        assert set(mode.knobs) <= fields, name
        if mode.factory is None:
            assert mode.knobs == (), name
            continue
        before = state(mode.policy(base, profile))
        for knob, value in changed.items():
            after = state(mode.policy(dataclasses.replace(base, **{knob: value}), profile))
            assert (after != before) == (knob in mode.knobs), (name, knob)


def state(value):
    """A policy's settings as plain values, nested policies and profiles included."""
    if hasattr(value, "__dict__"):
        return {key: state(v) for key, v in vars(value).items()}
    if isinstance(value, (list, tuple)):
        return [state(v) for v in value]
    return value
