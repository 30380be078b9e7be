"""Tests for libraspec.cost: the latency profile and the modeled round time."""

import dataclasses
import math

import pytest

from libraspec.cost import LatencyProfile, ar_text_s

LAYER = "unit"  # tests/conftest.py


def profile():
    # verify 1..4 tokens, draft 1..2 blocks of n = 3
    return LatencyProfile((0.06, 0.10, 0.11, 0.13), (0.02, 0.03), 3, {"machine": "test"})


def test_table_and_extrapolation():
    p = profile()
    assert p.verify_time(1) == 0.06 and p.verify_time(4) == 0.13
    assert math.isclose(p.verify_time(6), 0.13 + 2 * 0.02)  # last segment slope 0.02
    assert p.draft_time(0) == 0.0 and p.draft_time(2) == 0.03
    assert math.isclose(p.draft_time(4), 0.03 + 2 * 0.01)
    assert p.ar_token_time() == 0.06


def test_extrapolation_never_falls():
    p = LatencyProfile((0.05, 0.04), (0.01,), 4)
    assert p.verify_time(10) == 0.04  # negative last slope clamped to 0
    assert math.isclose(p.draft_time(3), 0.03)  # single block: linear from (0, 0)


def test_round_time_formula():
    p = profile()
    # d = 1: one block + verify 2 tokens; d = 3: one block + 4; d = 4: two blocks + 5
    assert math.isclose(p.round_time(1), 0.02 + 0.10)
    assert math.isclose(p.round_time(3), 0.02 + 0.13)
    assert math.isclose(p.round_time(4), 0.03 + 0.15)
    upkeep = dataclasses.replace(p, fit_s=0.004)  # the drafter's context upkeep, once per round
    assert math.isclose(upkeep.round_time(4), 0.03 + 0.15 + 0.004)
    with pytest.raises(ValueError, match="d must be >= 1"):
        p.round_time(0)


def test_linear_fit_recovers_linear_profile():
    p = LatencyProfile.from_linear(0.05, 0.003, 0.01, 15, 61, meta={"context": 300})
    t0, c = p.linear_fit()
    assert math.isclose(t0, 0.05, rel_tol=1e-9) and math.isclose(c, 0.003, rel_tol=1e-9)
    assert len(p.verify_s) == 61 and len(p.draft_s) == 5
    assert p.meta["context"] == 300 and p.meta["source"] == "linear"


def test_json_round_trip(tmp_path):
    p = profile()
    path = p.to_json(str(tmp_path / "sub" / "profile.json"))
    q = LatencyProfile.from_json(path)
    assert q == p and q.meta == p.meta
    assert LatencyProfile.from_dict(p.to_dict()) == p
    assert [f.name for f in tmp_path.joinpath("sub").iterdir()] == ["profile.json"]


def with_context(p: LatencyProfile) -> LatencyProfile:
    """`p` timed after 256 tokens, a forward of k rows 10 us (k = 1) to 30 us (k >= 9) dearer a token beyond."""
    return dataclasses.replace(p, context_len=256, context_k=(1, 9), context_slope_s=(1e-5, 3e-5))


def test_the_context_term_prices_a_forward_after_any_context():
    p = with_context(profile())
    assert p.ar_token_time() == p.ar_token_time(256) == p.verify_s[0]
    assert p.ar_token_time(1256) == pytest.approx(p.verify_s[0] + 1000 * 1e-5)
    assert p.verify_time(5, 1256) == pytest.approx(p.verify_time(5) + 1000 * 2e-5)  # slope halfway 1 -> 9
    assert p.verify_time(20, 2256) == pytest.approx(p.verify_time(20) + 2000 * 3e-5)  # flat past k = 9
    assert p.ar_token_time(56) == pytest.approx(p.verify_s[0] - 200 * 1e-5)  # cheaper below c0
    assert p.tree_verify_time(3, 1256) == pytest.approx(p.tree_verify_time(3) + 1000 * 1.5e-5)
    assert profile().verify_time(5, 5000) == profile().verify_time(5)  # no term: every context alike
    assert LatencyProfile.from_dict(p.to_dict()) == p and p != profile()
    assert ar_text_s(p, 1000, 3) == pytest.approx(sum(p.ar_token_time(c) for c in (1000, 1001, 1002)))
    assert ar_text_s(profile(), 1000, 3) == pytest.approx(3 * profile().ar_token_time())


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(context_len=256, context_k=(1, 9), context_slope_s=(1e-5,)), "match"),
        (dict(context_len=256, context_k=(9, 1), context_slope_s=(1e-5, 2e-5)), "rise"),
        (dict(context_len=256, context_k=(1,), context_slope_s=(-1e-5,)), ">= 0"),
        (dict(context_len=0, context_k=(1,), context_slope_s=(1e-5,)), "context_len"),
    ],
)
def test_bad_context_terms(changes, message):
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(profile(), **changes)


def test_meta_is_not_compared_and_profile_hashes():
    a = LatencyProfile((0.1, 0.2), (0.01,), 2, {"machine": "a"})
    b = LatencyProfile([0.1, 0.2], [0.01], 2, {"machine": "b"})
    assert a == b and hash(a) == hash(b)


@pytest.mark.parametrize(
    "verify, draft, n, message",
    [
        ((0.1,), (0.01,), 2, "at least 2"),
        ((0.1, 0.0), (0.01,), 2, "> 0"),
        ((0.1, float("nan")), (0.01,), 2, "> 0"),
        ((0.1, 0.2), (), 2, "at least 1"),
        ((0.1, 0.2), (-0.01,), 2, "> 0"),
        ((0.1, 0.2), (0.01,), 0, "n must be"),
    ],
)
def test_bad_profiles(verify, draft, n, message):
    with pytest.raises(ValueError, match=message):
        LatencyProfile(verify, draft, n)


def test_bad_queries():
    p = profile()
    with pytest.raises(ValueError):
        p.verify_time(0)
    with pytest.raises(ValueError):
        p.draft_time(-1)
    with pytest.raises(ValueError, match="lacks"):
        LatencyProfile.from_dict({"verify_s": [0.1, 0.2]})


def test_tree_verification_time_interpolates_the_measured_trees():
    p = dataclasses.replace(profile(), tree_rows=(2, 9, 17), tree_verify_s=(0.08, 0.12, 0.20))
    assert p.tree_verify_time(2) == 0.08 and p.tree_verify_time(17) == 0.20
    assert math.isclose(p.tree_verify_time(13), 0.16)  # halfway between 9 and 17 rows
    assert math.isclose(p.tree_verify_time(25), 0.20 + 8 * 0.01)  # the last segment's slope per row
    assert p.tree_verify_time(1) == p.verify_time(1)  # below the trees: a chain forward of one token
    assert profile().tree_verify_time(9) == profile().verify_time(9)  # a profile from before trees were timed
    assert LatencyProfile.from_dict(p.to_dict()) == p
    old = profile().to_dict()
    del old["tree_rows"], old["tree_verify_s"]
    assert LatencyProfile.from_dict(old).tree_rows == ()
    for rows, times, message in (
        ((2,), (0.1,), "same length"),
        ((2, 9), (0.1,), "same length"),
        ((9, 2), (0.1, 0.2), "rise"),
        ((1, 9), (0.1, 0.2), "rise"),
        ((2, 9), (0.1, 0.0), "> 0"),
    ):
        with pytest.raises(ValueError, match=message):
            dataclasses.replace(profile(), tree_rows=rows, tree_verify_s=times)
