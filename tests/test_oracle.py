"""Tests for libraspec.oracle: accepted prefixes and the oracle length d*, and the d* the
engine annotates a round with against a brute-force recomputation from the full look-ahead."""

import dataclasses

import numpy as np
import pytest
import torch
from fake_drafters import GreedyOracleDrafter
from hypothesis import given, settings
from hypothesis import strategies as st

from libraspec.cost import LatencyProfile
from libraspec.engine import DecodeConfig, SpeculativeDecoder
from libraspec.models.registry import tiny_pair
from libraspec.oracle import oracle_length, oracle_rates
from libraspec.policy import StaticPolicy

LAYER = "unit"  # tests/conftest.py


def accepted_prefix_from_matches(matches) -> np.ndarray:
    """a(d) for d = 1..D from per-position acceptance (the arrays these tests hand the oracle).

    matches[i] tells whether draft i+1 is accepted given that drafts 1..i were; under
    prefix acceptance a(d) = min(d, m), m = number of leading accepted drafts.
    """
    matches = np.asarray(matches, dtype=bool)
    if matches.ndim != 1 or matches.size == 0:
        raise ValueError(f"matches must be a non-empty 1-D bool array, got shape {matches.shape}")
    rejected = np.flatnonzero(~matches)
    m = int(rejected[0]) if rejected.size else matches.size  # leading accepted drafts
    return np.minimum(np.arange(1, matches.size + 1), m).astype(np.int64)  # (D,)


def test_accepted_prefix_examples():
    assert accepted_prefix_from_matches([True, True, False, True]).tolist() == [1, 2, 2, 2]
    assert accepted_prefix_from_matches([False, True]).tolist() == [0, 0]
    assert accepted_prefix_from_matches([True] * 3).tolist() == [1, 2, 3]


def test_worked_oracle_example():
    # a = (1, 2, 2, 2), times (1, 1.5, 1.6, 3): rates 2/1 = 2, 3/1.5 = 2, 3/1.6, 3/3
    # the best rate 2 is reached at d = 1 and d = 2: the tie goes to d = 1.
    assert oracle_length([1, 2, 2, 2], [1.0, 1.5, 1.6, 3.0]) == 1
    # cheaper second length: 3 / 1.4 > 2, so d* = 2
    assert oracle_length([1, 2, 2, 2], [1.0, 1.4, 1.6, 3.0]) == 2


def test_oracle_ties_to_shorter_with_flat_cost():
    # flat cost: every d with the same a(d) ties; the longest accepted prefix wins, first d
    assert oracle_length([1, 2, 3, 3, 3], lambda d: 0.1) == 3
    assert oracle_length([0, 0, 0], np.ones(3)) == 1


@settings(deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=40), st.lists(st.floats(0.01, 1.0), min_size=40, max_size=40))
def test_oracle_is_first_argmax(matches, increments):
    a = accepted_prefix_from_matches(matches)
    times = np.cumsum(increments)[: len(a)]  # strictly increasing T_round
    d_star = oracle_length(a, times)
    rates = (a + 1) / times
    tie = rates.max() * (1 - 1e-12)  # the oracle's tie tolerance
    assert rates[d_star - 1] >= tie
    assert np.all(rates[: d_star - 1] < tie)  # no shorter d is as good
    # past the first rejection a(d) stops growing while T grows: d* <= max(1, m)
    assert d_star <= max(1, int(a[-1]))


def test_oracle_with_profile_round_time():
    profile = LatencyProfile.from_linear(0.05, 0.002, 0.01, 4, 16)
    a = accepted_prefix_from_matches([True] * 6 + [False] * 6)
    d_star = oracle_length(a, profile.round_time)
    brute = max(range(1, 13), key=lambda d: ((a[d - 1] + 1) / profile.round_time(d), -d))
    assert d_star == brute
    assert oracle_rates(a, profile.round_time).shape == (12,)


@pytest.mark.parametrize(
    "a, times, message",
    [
        ([], [], "non-empty"),
        ([2], [1.0], r"\[0, d\]"),
        ([-1], [1.0], r"\[0, d\]"),
        ([1, 0], [1.0, 1.0], "non-decreasing"),
        ([0.5], [1.0], "integers"),
        ([1, 1], [1.0], "each d"),
        ([1, 1], [1.0, 0.0], "> 0"),
        ([1, 1], [1.0, np.nan], "> 0"),
    ],
)
def test_oracle_bad_input(a, times, message):
    with pytest.raises(ValueError, match=message):
        oracle_length(a, times)


def test_bad_matches():
    with pytest.raises(ValueError, match="non-empty"):
        accepted_prefix_from_matches([])


def test_oracle_with_an_ar_step():
    """With zero_time, d = 0 competes: it wins exactly when the first draft would be rejected."""
    times = [1.2, 1.3, 1.4, 1.5]  # T_round(d), d = 1..4
    assert oracle_length([0, 0, 0, 0], times, zero_time=1.0) == 0
    assert oracle_length([0, 0, 0, 0], times) == 1
    assert oracle_length([1, 2, 2, 2], times, zero_time=1.0) == 2
    with pytest.raises(ValueError, match="zero_time"):
        oracle_length([1], [1.0], zero_time=0.0)


LOOK_AHEAD = 12  # d_max: two drafter passes of n = 7
# a second drafter pass costs as much as 25 verified positions: with every draft right d* = 7, not 12
PROFILE = LatencyProfile.from_linear(t0=0.05, c=0.004, draft_per_block=0.1, n=7, max_tokens=40)


@pytest.fixture(scope="module")
def llama():
    torch.set_num_threads(1)
    return tiny_pair("llama", seed=3, dtype=torch.float64)


@pytest.mark.parametrize(
    "drafter",
    [dict(right_for=2), dict(right_for=5), dict(), dict(wrong=True)],
    ids=["right-for-2", "right-for-5", "always-right", "always-wrong"],
)
def test_annotated_oracle_length_is_the_brute_force_argmax(llama, drafter):
    """Static d = d_max submits the whole look-ahead, so each record carries every draft the
    annotation judged; the target's greedy token after each draft prefix, from one plain
    forward over context + drafts, gives a(d), and d* = argmax (a(d) + 1) / T_round(d)."""
    pair = dataclasses.replace(llama, drafter=GreedyOracleDrafter(llama.target, block_size=8, **drafter))
    prompt = [5, 17, 42, 9]
    config = DecodeConfig(max_new_tokens=30, lookahead=LOOK_AHEAD, annotate_oracle=True)
    records = list(SpeculativeDecoder(pair, PROFILE).run(prompt, "static", StaticPolicy(LOOK_AHEAD), config))
    context = list(prompt)
    for record in records:
        look = record.chosen_length  # min(d_max, room left before max_new_tokens)
        if look == 0:
            assert record.oracle_length is None
        else:
            drafts = list(record.draft_tokens[:look])
            with torch.no_grad():
                logits = pair.target.model(input_ids=torch.tensor([context + drafts])).logits[0]  # (L + look, V)
            greedy = logits[len(context) - 1 : len(context) - 1 + look].argmax(dim=-1).tolist()  # (look,)
            a = accepted_prefix_from_matches([x == g for x, g in zip(drafts, greedy)])  # (look,)
            rates = {d: (int(a[d - 1]) + 1) / PROFILE.round_time(d) for d in range(1, look + 1)}
            rates[0] = 1 / (PROFILE.draft_time(1) + PROFILE.verify_time(1))  # an AR step after one drafted block
            best = max(rates.values())
            assert record.oracle_length == min(d for d, rate in rates.items() if rate == best), record.round_index
            assert record.accepted == a[-1]
        context += record.committed_tokens
    assert len(context) == len(prompt) + 30
