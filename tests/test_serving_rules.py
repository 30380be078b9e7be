"""The serving engines' length rules reproduce their sources' arithmetic on hand-made cases:
SGLang's adaptive steps (libraspec/serving/sglang.py) and transformers' assistant confidence
threshold with its ROC re-fit (libraspec/serving/transformers_threshold.py). Every expected
number below is computed by hand in the comments."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from libraspec.analysis.stepper import ArrayBuffer
from libraspec.modes import MODES, make_policy
from libraspec.policy import LengthPolicy
from libraspec.records import RoundRecord
from libraspec.serving import sglang
from libraspec.serving.sglang import SGLangAdaptivePolicy, next_tier
from libraspec.serving.transformers_threshold import ConfidenceThresholdPolicy, roc_threshold

LAYER = "unit"  # tests/conftest.py

BASE = RoundRecord(
    mode="test",
    round_index=0,
    start_position=0,
    draft_tokens=(),
    confidences=(),
    blocks_drafted=1,
    policy_steps=(),
    eps_bounds=(),
    chosen_length=0,
    accepted=0,
    committed_tokens=(0,),
    bonus_token=0,
    oracle_length=None,
    draft_s=0.0,
    policy_s=0.0,
    verify_s=0.0,
    modeled_s=0.0,
    cumulative_tokens=1,
    cumulative_s=0.0,
    cumulative_modeled_s=0.0,
)


def record(chosen: int, accepted: int, confidences=()) -> RoundRecord:
    q = tuple(confidences) or (0.5,) * chosen
    return dataclasses.replace(
        BASE, chosen_length=chosen, accepted=accepted, confidences=q, committed_tokens=(0,) * (accepted + 1)
    )


def stream(q_all, n: int) -> ArrayBuffer:
    return ArrayBuffer.revealing(q_all, n, 1)


# ---- SGLang: EMA of accepted drafts, tiers [1, 3, 7], warm-up 10, interval 5, hysteresis -0.25 / 0 ----


def test_sglang_defaults_are_the_documented_ones():
    assert sglang.TIERS == (1, 3, 7) and sglang.EMA_ALPHA == 0.2
    assert (sglang.WARMUP_BATCHES, sglang.UPDATE_INTERVAL) == (10, 5)
    assert (sglang.DOWN_HYSTERESIS, sglang.UP_HYSTERESIS) == (-0.25, 0.0)
    policy = SGLangAdaptivePolicy(20)
    assert policy.tiers == (1, 3, 7) and policy.snapshot() == (3, 2.0, 0)  # steps 3, EMA starts at steps - 1


def test_sglang_ema_over_a_sequence_of_accepted_lengths():
    policy = SGLangAdaptivePolicy(20)
    # ema = 0.8 ema + 0.2 a from 2.0: a = 3 -> 2.2; 3 -> 2.36; 0 -> 1.888; 1 -> 1.7104; 3 -> 1.96832
    expected = [2.2, 2.36, 1.888, 1.7104, 1.96832]
    for a, ema in zip([3, 3, 0, 1, 3], expected):
        policy.update(record(3, a))
        assert policy.ema == pytest.approx(ema, abs=1e-12)
    assert policy.batches == 5 and policy.steps == 3  # within the warm-up: no switch
    policy.update(record(0, 0))  # an AR step verified no draft: no verify batch
    assert policy.snapshot() == pytest.approx((3, 1.96832, 5))


def test_sglang_warm_up_then_the_tier_rises_at_the_first_recomputation():
    policy = SGLangAdaptivePolicy(20)
    buffer = stream(np.full(8, 0.9), 4)
    lengths = []
    for _ in range(15):
        lengths.append(policy.choose_length(buffer).d)
        policy.update(record(3, 3))  # every draft accepted
    # after 10 batches ema = 3 - 0.8^10 = 2.8926 > 2.5, yet batches 1..10 are warm-up and 11..14
    # fall between recomputations; batch 15 = warm-up + one interval recomputes: ema = 3 - 0.8^15
    assert lengths == [3] * 15
    assert policy.ema == pytest.approx(3 - 0.8**15) and policy.steps == 7
    assert policy.choose_length(stream(np.full(8, 0.9), 4)).d == 7


def test_sglang_update_interval_and_hysteresis_hold_a_tier_near_a_boundary():
    policy = SGLangAdaptivePolicy(20)
    for _ in range(15):
        policy.update(record(3, 3))
    assert policy.steps == 7
    ema15 = 3 - 0.8**15  # 2.964816
    steps = []
    for _ in range(5):  # batches 16..20, each accepting 2
        policy.update(record(7, 2))
        steps.append(policy.steps)
    # ema20 = 2 + (ema15 - 2) 0.8^5 = 2.31615: above 3 - 0.5 - 0.25 = 2.25, so 7 holds; from tier 3
    # the same EMA would not rise (2.31615 <= 3 - 0.5): the tier depends on where it came from
    assert policy.ema == pytest.approx(2 + (ema15 - 2) * 0.8**5) and policy.ema == pytest.approx(2.316151, abs=1e-6)
    assert steps == [7] * 5
    assert next_tier((1, 3, 7), 3, policy.ema) == 3
    assert next_tier((1, 3, 7), 7, policy.ema, down=0.0) == 3  # without the hysteresis it would drop
    for _ in range(4):  # batches 21..24: ema falls below 2.25 from batch 22, but no recomputation is due
        policy.update(record(7, 2))
        assert policy.steps == 7
    policy.update(record(7, 2))  # batch 25: ema = 2 + (ema15 - 2) 0.8^10 = 2.1036 <= 2.25 -> 3
    assert policy.ema == pytest.approx(2.1036, abs=1e-4) and policy.steps == 3


def test_sglang_tier_boundaries():
    tiers = (1, 3, 7)
    # at 3: down to 1 when ema <= 1 - 0.5 - 0.25 = 0.25, up to 7 when ema > 3 - 0.5 = 2.5
    assert [next_tier(tiers, 3, e) for e in (0.25, 0.2501, 2.5, 2.5001)] == [1, 3, 3, 7]
    # at 7: down to 3 when ema <= 2.25, and on down to 1 in one recomputation when ema <= 0.25
    assert [next_tier(tiers, 7, e) for e in (2.2501, 2.25, 0.25, 9.0)] == [7, 3, 1, 7]
    # at 1: up to 3 when ema > 0.5, and on to 7 in the same recomputation when ema > 2.5
    assert [next_tier(tiers, 1, e) for e in (0.5, 0.5001, 2.5001, -1.0)] == [1, 3, 7, 1]


def test_sglang_tiers_are_capped_at_d_max_and_blocks_drafted_on_demand():
    assert SGLangAdaptivePolicy(5).tiers == (1, 3, 5)
    two = SGLangAdaptivePolicy(2)
    assert two.tiers == (1, 2) and two.steps == 2 and two.ema == 1.0  # 3 snaps to 2, the nearest
    assert SGLangAdaptivePolicy(1).tiers == (1,)
    buffer = stream(np.full(6, 0.5), 2)
    assert SGLangAdaptivePolicy(20).choose_length(buffer).d == 3 and len(buffer.confidences) == 4
    policy = make_policy("sglang-adaptive", 4, d_max=5)
    assert isinstance(policy, LengthPolicy) and policy.tiers == (1, 3, 5) and policy.d_max == 5


def test_sglang_reset_restores_the_initial_state():
    policy = SGLangAdaptivePolicy(20)
    for _ in range(15):
        policy.update(record(3, 3))
    assert policy.snapshot() != (3, 2.0, 0)
    policy.reset()
    assert policy.snapshot() == (3, 2.0, 0)


# ---- transformers: threshold 0.4, at most 20 drafts, ROC re-fit minimising fpr + 3 fnr ----


def test_drafting_stops_at_the_first_confidence_below_the_threshold():
    policy = ConfidenceThresholdPolicy(24)
    assert (policy.threshold, policy.num_tokens, policy.schedule) == (0.4, 20, "constant")
    buffer = stream([0.9, 0.5, 0.39, 0.8, 0.1, 0.1], 2)
    assert policy.choose_length(buffer).d == 3  # q_3 = 0.39 < 0.4: it is drafted and verified, then stop
    assert len(buffer.confidences) == 4  # the second block only
    assert policy.choose_length(stream([0.4, 0.4, 0.1, 0.9], 2)).d == 3  # q = 0.4 is not below 0.4
    assert policy.choose_length(stream([0.2, 0.9], 2)).d == 1
    buffer = stream(np.full(24, 0.9), 4)
    assert policy.choose_length(buffer).d == 20 and len(buffer.confidences) == 20  # num_assistant_tokens
    assert ConfidenceThresholdPolicy(8).choose_length(stream(np.full(12, 0.9), 4)).d == 8  # d_max


def test_the_pairs_are_the_accepted_drafts_and_the_first_rejected_one():
    policy = ConfidenceThresholdPolicy(24)
    policy.update(record(4, 2, (0.9, 0.8, 0.3, 0.7, 0.2, 0.2)))  # 0.7 after the rejection and undrafted 0.2s: dropped
    assert policy.pairs == ((0.9, True), (0.8, True), (0.3, False))
    policy.update(record(2, 2, (0.6, 0.5, 0.1, 0.1)))  # all accepted: no unmatched pair
    assert policy.pairs[3:] == ((0.6, True), (0.5, True))
    policy.update(record(0, 0, (0.1, 0.1)))  # an AR step: nothing verified, nothing kept
    assert len(policy.pairs) == 5 and policy.threshold == 0.4  # 5 pairs: no re-fit yet


def test_the_roc_refit_minimises_fpr_plus_three_fnr():
    # pairs (q, matched): P = 4 matched, N = 3 unmatched; a draft counts as positive when q >= t
    q = [0.9, 0.8, 0.7, 0.6, 0.5, 0.35, 0.3]
    m = [1, 1, 0, 1, 0, 1, 0]
    # t     tp fp  fpr   fnr   fpr + 3 fnr   fpr + fnr
    # 0.9   1  0   0     3/4   2.25          0.75
    # 0.8   2  0   0     1/2   1.5           0.5   <- fpr + fnr's minimum
    # 0.7   2  1   1/3   1/2   1.8333        0.8333
    # 0.6   3  1   1/3   1/4   1.0833        0.5833
    # 0.5   3  2   2/3   1/4   1.4167        0.9167
    # 0.35  4  2   2/3   0     0.6667        0.6667 <- fpr + 3 fnr's minimum
    # 0.3   4  3   1     0     1             1
    assert roc_threshold(q, m) == 0.35
    assert roc_threshold(q, m, fn_weight=1.0) == 0.8
    # equal costs go to the highest threshold (np.argmin's first): P = N = 4, t = 0.7 gives
    # fpr 0 + 3 x 1/4 = 0.75 and t = 0.35 gives fpr 3/4 + 3 x 0 = 0.75 (every other t costs more)
    assert roc_threshold([0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.35, 0.3], [1, 1, 1, 0, 0, 0, 1, 0]) == 0.7
    with pytest.raises(ValueError, match="matched and unmatched"):
        roc_threshold([0.9, 0.8], [1, 1])

    policy = ConfidenceThresholdPolicy(24)
    policy.update(record(3, 2, (0.9, 0.8, 0.7)))  # 3 pairs
    policy.update(record(2, 1, (0.6, 0.5)))  # 5 pairs: the re-fit needs more than 5
    assert policy.threshold == 0.4
    policy.update(record(4, 1, (0.35, 0.3, 0.95, 0.95)))  # 7 pairs, the 0.95s after the rejection dropped
    assert [p for p, _ in policy.pairs] == q and [int(k) for _, k in policy.pairs] == m
    assert policy.threshold == 0.35
    assert policy.choose_length(stream([0.5, 0.36, 0.34, 0.9], 2)).d == 3  # 0.34 < 0.35 stops


def test_confidences_equal_in_meaning_are_equal_at_the_threshold():
    # a drafter reporting q = 0.9 everywhere gives values a few ulps apart (the softmax's summation
    # order differs between CPUs): the re-fitted threshold is one of them, and drafting must not stop
    # at a value 1e-16 below it, nor go on past one 1e-6 below it
    ulp = np.spacing(0.9)
    policy = ConfidenceThresholdPolicy(24)
    policy.update(record(4, 3, (0.9 + 7 * ulp, 0.9 + 4 * ulp, 0.9, 0.9)))
    policy.update(record(4, 1, (0.9 + ulp, 0.9 + 9 * ulp, 0.9, 0.9)))
    assert policy.threshold == 0.9  # 6 pairs of both kinds, all q read as 0.9: the re-fit's threshold
    assert {q for q, _ in policy.pairs} == {0.9}
    assert policy.choose_length(stream(np.full(24, 0.9 - 3 * ulp), 4)).d == 20  # not below 0.9
    assert policy.choose_length(stream([0.9, 0.9 - 1e-6, 0.9, 0.9], 2)).d == 2  # below: stops


def test_no_refit_from_one_kind_of_pair_and_reset_restores_the_initial_state():
    policy = ConfidenceThresholdPolicy(24)
    for _ in range(3):
        policy.update(record(4, 4, (0.9, 0.2, 0.9, 0.2)))  # 12 matched pairs, none unmatched
    assert policy.threshold == 0.4 and len(policy.pairs) == 12
    policy.update(record(2, 0, (0.95, 0.1)))  # one unmatched pair: re-fit
    # thresholds 0.95 (fpr 1, fnr 1: cost 4), 0.9 (fpr 1, fnr 1/2: 2.5, a point sklearn drops as
    # collinear), 0.2 (fpr 1, fnr 0: 1)
    assert policy.threshold == 0.2
    policy.reset()
    assert (policy.threshold, policy.num_tokens, policy.pairs) == (0.4, 20, ())


def test_the_heuristic_schedule_moves_the_draft_cap_and_the_threshold_still_stops():
    policy = ConfidenceThresholdPolicy(30, schedule="heuristic")
    policy.update(record(20, 20))  # all accepted: 20 + 2
    assert policy.num_tokens == 22 and policy.choose_length(stream(np.full(32, 0.9), 4)).d == 22
    for _ in range(5):
        policy.update(record(5, 5))  # a round counts as all accepted whatever its d: 22 + 5 x 2
    assert policy.num_tokens == 32  # transformers' count has no cap; d_max caps the drafts
    assert policy.choose_length(stream(np.full(32, 0.9), 4)).d == 30
    policy.update(record(30, 3))  # a rejection: 32 - 1
    assert policy.num_tokens == 31
    assert policy.choose_length(stream([0.9, 0.3, 0.9, 0.9], 2)).d == 2  # the threshold stops first
    with pytest.raises(ValueError, match="schedule"):
        ConfidenceThresholdPolicy(8, schedule="heuristic_transient")


def test_the_registry_entries():
    for name, label in (("sglang-adaptive", "SGLang adaptive"), ("hf-threshold", "transformers threshold")):
        mode = MODES[name]
        assert (mode.label, mode.kind, mode.knobs) == (label, "policy", ("d_max",))
        policy = make_policy(name, 4, d_max=12)
        assert isinstance(policy, LengthPolicy) and policy.name == name and policy.d_max == 12
