"""libraspec.verify on hand-made distributions: a(d) of the oracle look-ahead (greedy and
sampled, the same acceptance test as one round's verification) and top-k / top-p filtering."""

from __future__ import annotations

import math

import pytest
import torch

from libraspec.verify import Randomness, SamplingConfig, acceptance_prefix, greedy_accept, probabilities, sample_accept

LAYER = "unit"  # tests/conftest.py

GREEDY, SAMPLED = SamplingConfig(0.0), SamplingConfig(1.0)


def logits_of(probs) -> torch.Tensor:
    """Logits whose softmax at temperature 1 is `probs`: (..., V) -> (..., V)."""
    return torch.tensor(probs, dtype=torch.float64).log()


# -- greedy a(d) ---------------------------------------------------------------------------------

BEST = [2, 0, 3, 1, 4]  # the target's argmax at positions 1..5
TARGET = torch.nn.functional.one_hot(torch.tensor(BEST), 5).double() * 4.0  # (5, V=5)


@pytest.mark.parametrize(
    "drafts, expected",
    [
        ([2, 0, 1, 1], [1, 2, 2, 2]),  # draft 3 is wrong: a(d) stops growing at 2, draft 4 does not count
        ([2, 0, 3, 1], [1, 2, 3, 4]),  # every draft right
        ([1, 0, 3, 1], [0, 0, 0, 0]),  # the first draft wrong
        ([2, 4, 3, 1], [1, 1, 1, 1]),
    ],
)
def test_greedy_acceptance_prefix(drafts, expected):
    drafts = torch.tensor(drafts)
    a = acceptance_prefix(drafts, None, TARGET, GREEDY, None)
    assert a.tolist() == expected
    for d in range(1, len(drafts) + 1):  # the same a as verifying d drafts in a round
        assert greedy_accept(drafts[:d], TARGET[: d + 1]) == (expected[d - 1], BEST[expected[d - 1]])


# -- sampled a(d) --------------------------------------------------------------------------------

# target p_1..p_5 and drafter q_1..q_4 over V = 4; draft i proposes token DRAFTS[i]
P = [[0.5, 0.2, 0.2, 0.1], [0.1, 0.2, 0.3, 0.4], [0.1, 0.3, 0.3, 0.3], [0.6, 0.2, 0.1, 0.1], [0.25] * 4]
Q = [[0.25, 0.25, 0.25, 0.25], [0.1, 0.4, 0.2, 0.3], [0.5, 0.1, 0.2, 0.2], [0.3, 0.3, 0.2, 0.2]]
DRAFTS = torch.tensor([0, 1, 0, 0])  # p / q of each draft: 2, 0.5, 0.2, 2


@pytest.mark.parametrize(
    "uniforms, expected",
    [
        ([0.9, 0.3, 0.7, 0.9], [1, 2, 2, 2]),  # draft 3: 0.7 * 0.5 >= 0.1, rejected
        ([0.9, 0.3, 0.1, 0.9], [1, 2, 3, 4]),  # draft 3: 0.1 * 0.5 < 0.1, accepted
        ([0.9, 0.6, 0.1, 0.9], [1, 1, 1, 1]),  # draft 2: 0.6 * 0.4 >= 0.2, rejected
        ([0.999, 0.499, 0.199, 0.999], [1, 2, 3, 4]),  # just below each ratio min(1, p / q)
        ([0.999, 0.499, 0.201, 0.999], [1, 2, 2, 2]),  # just above it at draft 3
    ],
)
def test_sampled_acceptance_prefix(uniforms, expected):
    uniforms = torch.tensor(uniforms, dtype=torch.float64)
    q = torch.tensor(Q, dtype=torch.float64)  # (4, V)
    a = acceptance_prefix(DRAFTS, q, logits_of(P), SAMPLED, Randomness.given(uniforms))
    assert a.tolist() == expected
    for d in range(1, 5):  # one round verifying d drafts with the same uniforms accepts a(d)
        got, _ = sample_accept(DRAFTS[:d], q[:d], logits_of(P[: d + 1]), SAMPLED, Randomness.given(uniforms))
        assert got == expected[d - 1], d


def test_a_draft_the_drafter_gave_no_probability_is_rejected():
    q = torch.tensor([[0.0, 0.5, 0.5, 0.0]] + Q[1:], dtype=torch.float64)  # q_1(x_1) = 0
    uniforms = torch.zeros(4, dtype=torch.float64)
    assert acceptance_prefix(DRAFTS, q, logits_of(P), SAMPLED, Randomness.given(uniforms)).tolist() == [0, 0, 0, 0]


# -- top-k / top-p -------------------------------------------------------------------------------


def softmax(values) -> list[float]:
    e = [math.exp(v) for v in values]
    return [x / sum(e) for x in e]


def test_top_k_keeps_the_k_largest_logits_per_row():
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.0], [4.0, 0.0, 1.0, 2.0]], dtype=torch.float64)  # (2, V=4)
    out = probabilities(logits, SamplingConfig(1.0, top_k=2))
    top = softmax([3.0, 2.0])
    assert out[0].tolist() == pytest.approx([0.0, top[0], top[1], 0.0])
    assert out[1].tolist() == pytest.approx([softmax([4.0, 2.0])[0], 0.0, 0.0, softmax([4.0, 2.0])[1]])
    hot = probabilities(logits, SamplingConfig(0.5, top_k=2))  # temperature scales before the softmax
    assert hot[0].tolist() == pytest.approx([0.0, *softmax([6.0, 4.0]), 0.0])
    assert torch.equal(probabilities(logits, SamplingConfig(1.0, top_k=4)), probabilities(logits, SAMPLED))


@pytest.mark.parametrize(
    "top_p, kept",
    [
        (0.45, [0.5]),  # 0.5 alone reaches 0.45
        (0.7, [0.5, 0.3]),  # 0.5 < 0.7: the token that crosses 0.7 is kept
        (0.85, [0.5, 0.3, 0.15]),
        (0.99, [0.5, 0.3, 0.15, 0.05]),
    ],
)
def test_top_p_keeps_the_smallest_prefix_reaching_p(top_p, kept):
    order = [2, 0, 3, 1]  # the same distribution with its tokens shuffled
    probs = [[0.5, 0.3, 0.15, 0.05][k] for k in order]
    out = probabilities(logits_of(probs), SamplingConfig(1.0, top_p=top_p))
    expected = [(p / sum(kept) if p in kept else 0.0) for p in probs]
    assert out.tolist() == pytest.approx(expected)


def test_top_k_filters_before_top_p():
    # after top-k = 3 the distribution is (4, 3, 2) / 9; its first two tokens already reach 0.75
    # (on the unfiltered 0.4, 0.3, 0.2, 0.1 top-p 0.75 would have kept three)
    out = probabilities(logits_of([0.4, 0.3, 0.2, 0.1]), SamplingConfig(1.0, top_k=3, top_p=0.75))
    assert out.tolist() == pytest.approx([4 / 7, 3 / 7, 0.0, 0.0])
