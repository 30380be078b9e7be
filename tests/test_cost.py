"""Tests for libraspec.cost: the latency profile and the modeled round time."""

import dataclasses
import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from profile_checks import physical

from libraspec.cost import LatencyProfile, ar_text_s, chain_prices
from libraspec.oracle import oracle_length
from libraspec.profiling import fit_context_term, knot_fit, monotone

ROOT = Path(__file__).resolve().parents[1]

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
    assert p.ar_token_time(56) == p.ar_token_time(0) == p.verify_s[0]  # flat below c0: never extrapolated there
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
        (dict(context_len=256, context_k=(1, 9), context_slope_s=(2e-5, 1e-5)), "never fall"),
        (dict(context_len=256, context_k=(1, 9), context_slope_s=(1e-5, 2e-5), context_points=(512,)), "one row"),
        (
            dict(
                context_len=256,
                context_k=(1, 9),
                context_slope_s=(0, 0),
                context_points=(128,),
                context_extra_s=((0, 0),),
            ),
            "rise beyond",
        ),
        (
            dict(
                context_len=32,
                context_k=(1, 9),
                context_slope_s=(0, 0),
                context_points=(128,),
                context_extra_s=((2e-3, 1e-3),),
            ),
            "never fall with k",
        ),
        (
            dict(
                context_len=32,
                context_k=(1, 9),
                context_slope_s=(0, 0),
                context_points=(128, 256),
                context_extra_s=((2e-3, 3e-3), (1e-3, 3e-3)),
            ),
            "never fall with the context",
        ),
    ],
)
def test_bad_context_terms(changes, message):
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(profile(), **changes)


def test_the_context_term_is_piecewise_between_the_timed_contexts():
    """Timed after 32 (c0), 128 and 1,024 tokens: flat up to c0, linear between the points, the
    last slope beyond; rows between the measured k interpolated, beyond them flat."""
    p = dataclasses.replace(
        profile(),
        context_len=32,
        context_k=(1, 9),
        context_slope_s=(1e-6, 2e-6),
        context_points=(128, 1024),
        context_extra_s=((1e-4, 2e-4), (1e-3, 3e-3)),
    )
    assert p.verify_time(5, 10) == p.verify_time(5, 32) == p.verify_time(5)
    assert p.verify_time(1, 80) == pytest.approx(p.verify_s[0] + 0.5e-4)  # halfway from c0 to 128
    assert p.verify_time(5, 128) == pytest.approx(p.verify_time(5) + 1.5e-4)  # halfway in k
    assert p.verify_time(9, 576) == pytest.approx(p.verify_time(9) + 2e-4 + 0.5 * 2.8e-3)
    assert p.verify_time(20, 2024) == pytest.approx(p.verify_time(20) + 3e-3 + 1000 * 2e-6)
    assert LatencyProfile.from_dict(p.to_dict()) == p


def stored_profiles():
    """Every latency profile the repository stores: profile files and the profiles inside result files."""
    found = []

    def walk(node, where):
        if isinstance(node, dict):
            if {"verify_s", "draft_s"} <= set(node) and ("n" in node or "block_size" in node):
                found.append(pytest.param(node, id=where))
                return
            for key, value in node.items():
                walk(value, f"{where}:{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{where}:{i}")

    for path in sorted((ROOT / "benchmarks").rglob("*.json")) + sorted((ROOT / "assets").rglob("*.json")):
        text = path.read_text()
        if '"verify_s"' in text:
            walk(json.loads(text), str(path.relative_to(ROOT)))
    return found


@pytest.mark.parametrize("data", stored_profiles())
def test_every_stored_profile_is_physical(data):
    physical(LatencyProfile.from_dict(data))


OLD_SHAPE = dataclasses.replace(  # this machine's shape timed after 256 tokens, one slope per k through c0
    LatencyProfile((0.0458, 0.0459, 0.0459, 0.0459, 0.0459, 0.05), (0.005,), 7),
    context_len=256,
    context_k=(1, 5),
    context_slope_s=(1e-6, 1e-5),
)


def test_profiles_are_physical_where_the_old_context_term_was_not():
    """The old model extrapolated each row's slope below c0 = 256, steeper for more rows: 4 verified
    rows came out cheaper than 1 after 30 tokens. Now the term is flat below c0, and every synthetic,
    linear and noisy profile stays physical."""
    assert OLD_SHAPE.verify_time(4, 30) >= OLD_SHAPE.verify_time(1, 30)
    physical(OLD_SHAPE)
    physical(LatencyProfile.from_linear(0.02, 0.001, 0.005, 7, 30))
    for noisy in noisy_profiles():
        physical(noisy)


def noisy_profiles(count: int = 20) -> list[LatencyProfile]:
    """Profiles fitted as a measurement fits them (`knot_fit`, `monotone`, `profiling.fit_context_term`)
    from medians under heavy noise: forwards after 32 tokens (c0), 128, 256, 1,024 and 2,048, whose
    extra seconds rise with the context and the rows only on average."""
    rng = np.random.default_rng(0)
    contexts, ks, out = (128, 256, 1024, 2048), (1, 2, 4, 8, 16, 25), []
    for _ in range(count):
        medians = {
            (c, k): 0.04 + 0.002 * k + 2e-5 * k**0.5 * (c - 32) + rng.normal(0, 0.006)
            for c in (32,) + contexts
            for k in ks
        }
        term_k, slopes, points, extra, _ = fit_context_term(32, contexts, ks, medians)
        out.append(
            LatencyProfile(
                knot_fit(0.04 + 0.002 * np.arange(1, 26) + rng.normal(0, 0.004, 25)),
                monotone(0.005 * np.arange(1, 4) + rng.normal(0, 0.001, 3)),
                7,
                tree_rows=(2, 9, 17),
                tree_verify_s=monotone(0.04 + rng.uniform(0, 0.05, 3)),
                context_len=32,
                context_k=term_k,
                context_slope_s=slopes,
                context_points=points,
                context_extra_s=extra,
            )
        )
    return out


def test_a_round_that_accepted_nothing_has_no_better_length_than_zero():
    """With nothing accepted, every d commits one token: d* = 0 at every context, for every stored
    profile and a freshly made one."""
    buffer = SimpleNamespace(steps_for=lambda d: -(-d // 7), steps_run=lambda steps: ["dflash"] * steps)
    for data in [p.values[0] for p in stored_profiles()] + [
        LatencyProfile.from_linear(0.04, 0.0, 0.005, 7, 30).to_dict()
    ]:
        p = LatencyProfile.from_dict(data)
        for context in (10, 30, 60, 256, 1000, 3000):
            price = chain_prices(p, buffer, needs_features=True, context=context)
            d_max = min(24, len(p.verify_s) - 1)
            assert oracle_length([0] * d_max, price, zero_time=price(0)) == 0


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
