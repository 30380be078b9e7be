"""Tests for libraspec.analysis.theory: expectations by exact enumeration and Theorems 3.2-3.6."""

import dataclasses
import itertools
import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from libraspec.analysis.theory import (
    alpha_from_costs,
    auto_alpha,
    exhaustive_argmax,
    expected_speedup,
    expected_speedup_curve,
    expected_tau_curve,
    is_beneficial,
    iterate_beneficial,
    marginal_benefit,
    objective_curve,
)
from libraspec.cost import LatencyProfile
from libraspec.policy import expected_accepted

LAYER = "unit"  # tests/conftest.py

probs = st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=1, max_size=30)


def enumerate_accepted(p, d):
    """E[accepted] over every accept/reject outcome of positions 1..d (prefix acceptance)."""
    total = 0.0
    for outcome in itertools.product((0, 1), repeat=d):
        weight = math.prod(p[i] if x else 1 - p[i] for i, x in enumerate(outcome))
        leading = next((i for i, x in enumerate(outcome) if not x), d)  # accepted prefix
        total += weight * leading
    return total


@settings(deadline=None)
@given(st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=1, max_size=7))
def test_expected_accepted_matches_enumeration(p):
    for d in range(len(p) + 1):
        assert math.isclose(expected_accepted(p, d), enumerate_accepted(p, d), abs_tol=1e-12)


def test_expected_accepted_worked_example():
    # p = (.5, .5, 1): E = .5 + .25 + .25 = 1.0 accepted; E[tau_3] = 2.0
    assert expected_accepted([0.5, 0.5, 1.0], 3) == 1.0
    assert expected_tau_curve([0.5, 0.5, 1.0], 3).tolist() == [1.5, 1.75, 2.0]


@settings(deadline=None)
@given(st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=6, max_size=6))
def test_expected_speedup_matches_enumeration(p):
    profile = LatencyProfile.from_linear(0.06, 0.004, 0.01, 4, 8)
    curve = expected_speedup_curve(p, profile, 6)
    for d in range(1, 7):
        brute = (1 + enumerate_accepted(p, d)) * profile.ar_token_time() / profile.round_time(d)
        assert math.isclose(expected_speedup(p, d, profile), brute, rel_tol=1e-12)
        assert math.isclose(curve[d - 1], brute, rel_tol=1e-12)


def test_exhaustive_argmax_ties_to_shorter():
    assert exhaustive_argmax([0.0] * 5, lambda d: 1.0, 5) == 1  # every d commits 1 token in 1 s
    assert exhaustive_argmax([1.0] * 5, lambda d: 1.0, 5) == 5  # flat cost, all accepted


@settings(deadline=None)
@given(probs, st.data())
def test_theorem_3_2_marginal_form(p, data):
    d = data.draw(st.integers(1, len(p)))
    d_new = data.draw(st.integers(1, len(p)))
    assume(d != d_new)
    t0, c = data.draw(st.floats(0.01, 1.0)), data.draw(st.floats(0.001, 1.0))

    def verify(k):
        return t0 + c * k

    marginal, average = marginal_benefit(p, d, d_new, verify)
    assume(abs(marginal - average) > 1e-9 * max(1.0, average))  # away from exact ties
    expected = marginal > average if d_new > d else marginal < average
    assert is_beneficial(p, d, d_new, verify) == expected


@settings(deadline=None)
@given(probs, st.floats(0.01, 1.0), st.floats(0.001, 1.0))
def test_theorem_3_5_criterion(p, t0, c):
    # affine verification: E[eta_{d+1}] > E[eta_d] iff prod_{i<=d+1} p_i > c E[tau_d] / T_d (Eq. 7)
    def verify(k):
        return t0 + c * k

    tau = expected_tau_curve(p, len(p))
    for d in range(1, len(p)):
        lhs, rhs = float(np.prod(p[: d + 1])), c * tau[d - 1] / verify(d)
        assume(abs(lhs - rhs) > 1e-9)
        assert is_beneficial(p, d, d + 1, verify) == (lhs > rhs)


convex_costs = st.tuples(st.floats(0.01, 1.0), st.floats(0.0, 1.0), st.floats(0.0, 0.05))


@settings(deadline=None)
@given(probs, convex_costs, st.data())
def test_theorem_3_6_converges_under_convex_verification(p, cost, data):
    # premises: drafting-free objective E[tau_d] / T(d), T(d) = t0 + c d + e d^2 with
    # t0 > 0, c, e >= 0 (non-decreasing marginal cost); p any values in [0, 1]
    t0, c, e = cost

    def verify(d):
        return t0 + c * d + e * d * d

    d_max = len(p)
    d0 = data.draw(st.integers(1, d_max))
    path = iterate_beneficial(p, d0, verify, d_max)
    values = objective_curve(p, verify, d_max)
    assert path[0] == d0
    assert all(abs(b - a) == 1 for a, b in zip(path, path[1:]))
    assert all(values[b - 1] > values[a - 1] for a, b in zip(path, path[1:]))
    assert len(set(np.sign(np.diff(path)))) <= 1  # unimodal: never turns back
    assert math.isclose(values[path[-1] - 1], values.max(), rel_tol=1e-12)
    if np.sum(values >= values.max() * (1 - 1e-12)) == 1:  # unique maximiser
        assert path[-1] == exhaustive_argmax(p, verify, d_max)


@settings(deadline=None)
@given(st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=12, max_size=12), st.integers(1, 12))
def test_theorem_3_6_with_single_block_profile(p, d0):
    # a profile whose one block covers d_max drafts a constant cost: round time is affine
    profile = LatencyProfile.from_linear(0.05, 0.003, 0.01, 16, 13)
    path = iterate_beneficial(p, d0, profile, 12)
    curve = expected_speedup_curve(p, profile, 12)
    assert math.isclose(curve[path[-1] - 1], curve.max(), rel_tol=1e-12)


def test_concave_verification_breaks_convergence():
    # premise violated: marginal costs .5 then .1. p = (.9, .9, .9):
    # E[tau] = (1.9, 2.71, 3.439), T = (1, 1.5, 1.6) -> values (1.9, 1.807, 2.149)
    def verify(d):
        return (1.0, 1.5, 1.6)[d - 1]

    p = [0.9, 0.9, 0.9]
    assert iterate_beneficial(p, 1, verify, 3) == [1]  # stuck at the local maximum
    assert exhaustive_argmax(p, verify, 3) == 3


def test_alpha_from_costs():
    # alpha = T_verify / (tau c) = 0.16 / (2 * 0.004) = 20
    assert math.isclose(alpha_from_costs(0.16, 2.0, 0.004), 20.0)
    profile = LatencyProfile.from_linear(0.05, 0.002, 0.01, 15, 25)
    # verify 8 drafts = 9 tokens: 0.05 + 0.018 = 0.068; alpha = 0.068 / (1.7 * 0.002) = 20
    assert math.isclose(auto_alpha(profile, 1.7, 8), 20.0)
    flat = LatencyProfile((0.05, 0.05, 0.05), (0.01,), 4)
    with pytest.raises(ValueError, match="unbounded"):
        auto_alpha(flat, 2.0, 3)
    with pytest.raises(ValueError, match="tau"):
        alpha_from_costs(0.1, 0.0, 0.01)


def test_bad_theory_input():
    with pytest.raises(ValueError, match="within"):
        expected_accepted([1.5], 1)
    with pytest.raises(ValueError, match="every position"):
        expected_accepted([0.5], 2)
    with pytest.raises(ValueError, match="d0"):
        iterate_beneficial([0.5, 0.5], 3, lambda d: 1.0, 2)
    with pytest.raises(ValueError, match="cost"):
        objective_curve([0.5], 1.0, 1)


def test_a_round_is_priced_by_the_steps_its_drafter_runs():
    """theory prices a round by its drafting steps, as the engine prices it: look-up pays lookup_s a
    step and no upkeep, block diffusion its passes and fit_s, a hybrid round both proposals of its
    first step, the look-up that ran dry before its block-diffusion step, and the upkeep."""
    from types import SimpleNamespace

    from libraspec.cost import BLOCK_DIFFUSION, LOOK_UP, Drafting, chain_round_s, drafting_s
    from libraspec.drafters import round_drafting
    from ui.stepthrough import Inputs, drafting_of

    profile = LatencyProfile(
        (0.05, 0.06, 0.07, 0.08, 0.09, 0.10, 0.11), (0.01, 0.02), n=2, lookup_s=0.0004, fit_s=0.003
    )
    p = [0.9, 0.8, 0.7, 0.6]
    for d in (1, 3, 4):
        steps = -(-d // 2)
        assert profile.round_time(d, LOOK_UP) == pytest.approx(profile.verify_time(d + 1) + steps * 0.0004)
        assert profile.round_time(d) == pytest.approx(profile.verify_time(d + 1) + profile.draft_time(steps) + 0.003)
    hybrid = round_drafting("hybrid", ("lookup", "lookup", "dflash"))  # kept look-up twice, then it ran dry
    passes, look = profile.draft_time, 0.0004  # passes(k): k block-diffusion passes in one round
    for d, drafting in ((1, passes(1) + look), (3, passes(1) + 2 * look), (5, passes(2) + 2 * look + look)):
        assert profile.round_time(d, hybrid) == pytest.approx(profile.verify_time(d + 1) + drafting + 0.003)
    assert drafting_s(profile, hybrid.steps(4)) == pytest.approx(passes(3) + 3 * look)  # dflash repeats
    assert round_drafting("dflash", ("lookup",)) == BLOCK_DIFFUSION and round_drafting("lookup") == LOOK_UP
    assert expected_speedup(p, 3, profile, LOOK_UP) > expected_speedup(p, 3, profile)  # drafting cheaper
    assert exhaustive_argmax(p, profile, 4, LOOK_UP) >= exhaustive_argmax(p, profile, 4)
    with pytest.raises(ValueError, match="Drafting"):
        profile.round_time(2, "hybrid")
    for bad in (dict(kept=()), dict(kept=("hybrid",)), dict(discarded=((-1, "lookup"),))):
        with pytest.raises(ValueError, match="kept sources|discarded"):
            Drafting(**bad)
    with pytest.raises(ValueError, match="drafts per step"):
        Drafting(n=-1)
    head = dataclasses.replace(profile, eagle_s=0.002, eagle_fit_s=0.001)  # a head round: d passes of one token
    assert head.round_time(4, round_drafting("eagle")) == pytest.approx(head.verify_time(5) + 4 * 0.002 + 0.001)
    with pytest.raises(ValueError, match="unknown drafter"):
        round_drafting("medusa")
    measured = Inputs(cost="measured profile")
    kept = ("lookup",) * 2 + ("dflash",) * 4  # n = 2: steps lookup, dflash, dflash
    race_of = lambda drafter: SimpleNamespace(  # noqa: E731  (a replayed race round)
        drafter=drafter, n=2, record=SimpleNamespace(draft_sources=kept) if drafter else None
    )
    assert drafting_of(race_of("lookup"), measured, profile) == LOOK_UP
    assert drafting_of(race_of("hybrid"), measured, profile) == Drafting(
        ("lookup", "dflash", "dflash"), ((0, "dflash"), (1, "lookup")), needs_features=True
    )
    assert drafting_of(race_of("dflash"), measured, profile) == BLOCK_DIFFUSION
    assert drafting_of(race_of(None), measured, profile) == BLOCK_DIFFUSION  # synthetic or pasted q_i
    assert drafting_of(race_of("lookup"), Inputs(cost="linear t0 + c*d"), profile) == BLOCK_DIFFUSION
    assert drafting_of(race_of("lookup"), measured, None) == BLOCK_DIFFUSION  # no measured profile yet
    assert chain_round_s(profile, hybrid.steps(1), 1, True) == profile.round_time(1, hybrid)
