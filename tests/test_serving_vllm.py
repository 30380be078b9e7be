"""vLLM's rules (libraspec/serving/vllm.py) on hand-made cases whose answers are worked out here:
the global draft budget, the per-request rule priced by a linear profile, the batch-size schedule
and the online acceptance calibration."""

from __future__ import annotations

import dataclasses
import json
import math
import re

import numpy as np
import pytest
from exact import output_distribution, total_variation
from test_exact_sampling import PROFILE as EXACT_PROFILE
from test_exact_sampling import PROMPT, topk_target
from test_sampling import pair as v6_pair  # noqa: F401  (fixture)

from libraspec.analysis.stepper import ArrayBuffer
from libraspec.cost import DIFFUSION, LOOKUP, LatencyProfile, chain_round_s
from libraspec.engine import SpeculativeDecoder
from libraspec.modes import MODES, make_policy
from libraspec.policy import LibraSpecPolicy
from libraspec.records import RoundRecord
from libraspec.serving.vllm import (
    BatchSchedulePolicy,
    CalibratedView,
    OnlineCalibration,
    ScheduleError,
    VLLMAdaptivePolicy,
    checked_ranges,
    fit_logistic,
    global_budget,
    load_schedule,
    schedule_length,
    survival,
)

LAYER = "unit"  # tests/conftest.py

# ---- the global budget --------------------------------------------------------------------------


def rate(gain: float, cost: float) -> float:
    return gain / cost


def test_a_confident_requests_fifth_draft_outranks_a_doubtful_requests_first():
    """A: q = 0.9 five times, S = .9, .81, .729, .6561, .59049; D: q = 0.5, S = .5, .25, ...
    Draft cost 10 ms for the batch, verification 20 ms + 10 ms a row. Worked by hand:
    B = 4: (2 + 3.0951) / (0.01 + 0.02 + 0.06) = 56.61
    B = 5: (2 + 3.68559) / 0.10 = 56.86  (A's fifth, S = 0.59049, before D's first, 0.5)
    B = 6: (2 + 4.18559) / 0.11 = 56.23  (D's first does not pay)
    so B = 5, every slot A's: d = [5, 0]."""
    A, D = survival([0.9] * 5), survival([0.5] * 5)

    def verify(rows):
        return 0.02 + 0.01 * rows

    B, lengths = global_budget([A, D], lambda R: 0.01, verify)
    assert (B, lengths) == (5, [5, 0])
    g4, g5, g6 = 2 + A[:4].sum(), 2 + A.sum(), 2 + A.sum() + 0.5
    assert rate(g5, 0.01 + verify(7)) > max(rate(g4, 0.01 + verify(6)), rate(g6, 0.01 + verify(8)))
    assert rate(g5, 0.01 + verify(7)) == pytest.approx(56.8559)
    # with rows at 5 ms D's first enters too, after A's five: B = 6 at 6.18559 / 0.07 = 88.37 against
    # 87.47 at B = 5 and 85.81 at B = 7 (D's second, S = 0.25)
    assert global_budget([A, D], lambda R: 0.01, lambda rows: 0.02 + 0.005 * rows) == (6, [5, 1])


def test_a_cost_table_where_every_request_should_take_an_ar_step():
    """Verification cost proportional to the rows (no fixed part), no draft cost: R requests alone
    run at R / (0.01 R) = 100 tokens a second, and any draft with S < 1 lowers the rate, so B = 0;
    with S = 1 (q = 1) the rates tie (4 = 1 / 0.25 = 2 / 0.5 = 3 / 0.75 exactly) and the first,
    B = 0, wins as numpy's argmax takes it."""
    survivals = [survival([0.99, 0.98, 0.97]), survival([0.95] * 4), survival([0.6])]
    assert global_budget(survivals, lambda R: 0.0, lambda rows: 0.01 * rows) == (0, [0, 0, 0])
    assert global_budget([survival([1.0, 1.0])], lambda R: 0.0, lambda rows: 0.25 * rows) == (0, [0])
    # the same drafts with a fixed forward cost: now drafts pay
    assert global_budget(survivals, lambda R: 0.0, lambda rows: 0.05 + 0.001 * rows)[0] > 0


def test_a_budget_limited_by_max_slots_takes_the_best_slots_first():
    """Free rows (flat verification): every slot pays, so B = every slot offered, or max_slots. Ties
    go to the shallower slot, then the earlier request."""
    A, D = survival([0.8, 0.8, 0.8]), survival([0.7, 0.9])  # A .8 .64 .512, D .7 .63
    flat = (lambda R: 0.005, lambda rows: 0.05)
    assert global_budget([A, D], *flat) == (5, [3, 2])
    assert global_budget([A, D], *flat, max_slots=3) == (3, [2, 1])  # .8, .7, .64
    assert global_budget([A, D], *flat, max_slots=0) == (0, [0, 0])
    assert global_budget([A, D, []], *flat, max_slots=4) == (4, [2, 2, 0])  # .8 .7 .64 .63; no drafts
    same = survival([0.5, 0.5])
    assert global_budget([same, same], *flat, max_slots=3) == (3, [2, 1])  # .5 (b0), .5 (b1), .25 (b0)
    assert global_budget([same, same], *flat, max_slots=1) == (1, [1, 0])


def naive_budget(survivals, draft_cost, verify_cost):
    """The objective straight from its statement: every B, the B best slots, the first best B."""
    slots = sorted(((-s, k, b) for b, row in enumerate(survivals) for k, s in enumerate(row)))
    R, best = len(survivals), None
    for B in range(len(slots) + 1):
        value = (R + sum(-s for s, _, _ in slots[:B])) / (draft_cost(R) + verify_cost(R + B))
        if best is None or value > best[0]:
            best = (value, B)
    B = best[1]
    return B, [sum(1 for _, _, owner in slots[:B] if owner == b) for b in range(R)]


def test_the_budget_equals_the_objective_worked_naively_and_admits_prefixes():
    rng = np.random.default_rng(5)
    for _ in range(200):
        survivals = [survival(rng.uniform(0.2, 1.0, rng.integers(0, 7))) for _ in range(rng.integers(1, 5))]
        t0, c, draft = rng.uniform(0.01, 0.05), rng.uniform(0.0, 0.01), rng.uniform(0.0, 0.01)
        B, lengths = global_budget(survivals, lambda R: draft, lambda rows: t0 + c * rows)
        assert (B, lengths) == naive_budget(survivals, lambda R: draft, lambda rows: t0 + c * rows)
        # admitted slots are a prefix: each admitted survival beats every one left out
        admitted = [s for row, d in zip(survivals, lengths) for s in row[:d]]
        left = [s for row, d in zip(survivals, lengths) for s in row[d:]]
        assert not admitted or not left or min(admitted) >= max(left)


def test_the_budget_refuses_what_it_cannot_read():
    with pytest.raises(ValueError, match="non-increasing"):
        global_budget([[0.5, 0.6]], lambda R: 0.0, lambda rows: 0.05)
    with pytest.raises(ValueError, match="within"):
        global_budget([[1.5]], lambda R: 0.0, lambda rows: 0.05)
    with pytest.raises(ValueError, match="at least one request"):
        global_budget([], lambda R: 0.0, lambda rows: 0.05)
    with pytest.raises(ValueError, match="seconds > 0"):
        global_budget([[0.5]], lambda R: 0.0, lambda rows: 0.0)
    with pytest.raises(ValueError, match="max_slots"):
        global_budget([[0.5]], lambda R: 0.0, lambda rows: 0.05, max_slots=-1)


# ---- the per-request rule at batch 1 ------------------------------------------------------------

LINEAR = LatencyProfile.from_linear(t0=0.05, c=0.004, draft_per_block=0.01, n=4, max_tokens=64)


def test_the_per_request_rule_drafts_a_second_block_only_when_it_could_pay():
    """n = 4, T(d) = 0.01 b + 0.05 + 0.004 (d + 1) with b blocks drafted (LINEAR, no upkeep).
    q = .9 .9 .9 .9 | .9 .9 .1 .1 | .1 ...: after one block S = .9 .81 .729 .6561, the rates
    d = 0..4 are 15.6, 27.9, 37.6, 45.3, 51.2: the last drafted d leads. d = 6 with a second block
    and S_5 = S_6 = S_4 (the bound) would give (4.0951 + 2 x .6561) / 0.098 = 55.2 > 51.2: draft it.
    With it, S_5..8 = .59049, .531441, .0531441, .00531441 and T gains 0.01:
    d = 4: 45.5, 5: 49.85, 6: 53.23, 7: 51.67, 8: 49.77. Beyond, a third block bounds every d
    below (5.2755 + 4 x .0053) / 0.12 = 44.1. So d = 6, two blocks."""
    q = [0.9] * 6 + [0.1] * 6
    buffer = ArrayBuffer.revealing(q, 4)
    policy = VLLMAdaptivePolicy(LINEAR, d_max=12)
    assert policy.choose_length(buffer).d == 6
    assert buffer.blocks_extended == 1
    assert policy.round_s(buffer, 2, 6) == pytest.approx(0.02 + 0.05 + 0.004 * 7)
    assert policy.round_s(buffer, 2, 6) == pytest.approx(chain_round_s(LINEAR, [DIFFUSION] * 2, 6, False))
    S = survival(q[:8])
    rates = [(1 + S[:d].sum()) / policy.round_s(buffer, 2, d) for d in range(9)]
    assert int(np.argmax(rates)) == 6 and rates[6] == pytest.approx(5.217031 / 0.098)


def test_the_per_request_rule_keeps_to_the_first_block_or_takes_an_ar_step():
    # q = 0.5: S = .5 .25 .125 .0625; rates 1 / 0.064 = 15.6, 1.5 / 0.068 = 22.1, 1.75 / 0.072 = 24.3,
    # 1.875 / 0.076 = 24.7, 1.9375 / 0.08 = 24.2: d = 3; a second block bounds d = 8 by
    # (1.9375 + 4 x .0625) / 0.106 = 20.6, so none is drafted
    buffer = ArrayBuffer.revealing([0.5] * 8, 4)
    policy = VLLMAdaptivePolicy(LINEAR, d_max=8)
    assert policy.choose_length(buffer).d == 3 and buffer.blocks_extended == 0
    # q = 0.01: one draft adds 0.01 token for 4 ms: 1 / 0.064 = 15.6 > 1.01 / 0.068 = 14.9, an AR step
    buffer = ArrayBuffer.revealing([0.01] * 8, 4)
    assert policy.choose_length(buffer).d == 0 and buffer.blocks_extended == 0
    # d_max below the block: the budget never reaches past it
    assert VLLMAdaptivePolicy(LINEAR, d_max=2).choose_length(ArrayBuffer.revealing([1.0] * 4, 4)).d == 2


def record(d, accepted, q=(), start=10, blocks=1, modeled_s=0.0, modeled_draft_s=0.0, tree_size=0):
    return RoundRecord(
        mode="libraspec",
        round_index=0,
        start_position=start,
        draft_tokens=(0,) * len(q),
        confidences=tuple(q),
        blocks_drafted=blocks,
        policy_steps=(),
        eps_bounds=(),
        chosen_length=d,
        accepted=accepted,
        committed_tokens=(0,) * (accepted + 1),
        bonus_token=0,
        oracle_length=None,
        draft_s=0.0,
        policy_s=0.0,
        verify_s=0.0,
        modeled_s=modeled_s,
        cumulative_tokens=accepted + 1,
        cumulative_s=0.0,
        cumulative_modeled_s=0.0,
        modeled_draft_s=modeled_draft_s,
        tree_size=tree_size,
    )


def test_the_per_request_rule_reads_its_context_and_upkeep_from_the_records():
    """The next round's context is the record's start plus its committed tokens; the upkeep is what
    the record's modeled seconds hold beyond its drafting and verification (fit_s or nothing)."""
    profile = dataclasses.replace(LINEAR, fit_s=0.003)
    policy = VLLMAdaptivePolicy(profile, d_max=8)
    buffer = ArrayBuffer.revealing([0.5] * 4, 4)
    assert policy.round_s(buffer, 1, 2) == pytest.approx(chain_round_s(profile, [DIFFUSION], 2, True))  # a guess
    for needs in (False, True):
        drafting = 0.01
        modeled = chain_round_s(profile, [DIFFUSION], 3, needs, 40)
        policy.update(record(3, 1, (0.5,) * 4, start=40, modeled_s=modeled, modeled_draft_s=drafting))
        assert policy._context == 42
        assert policy.round_s(buffer, 1, 2) == pytest.approx(chain_round_s(profile, [DIFFUSION], 2, needs, 42))
    policy.reset()
    assert policy._context is None
    fixed = VLLMAdaptivePolicy(profile, d_max=8, needs_features=False)
    assert fixed.round_s(buffer, 1, 2) == pytest.approx(chain_round_s(profile, [DIFFUSION], 2, False))


def test_the_per_request_rule_prices_a_look_up_round_by_its_steps():
    """A buffer that says its steps were look-ups is priced at lookup_s a step, without upkeep."""
    profile = dataclasses.replace(LINEAR, lookup_s=0.0002, fit_s=0.003)

    class LookupBuffer(ArrayBuffer):
        step_sources = (LOOKUP,)

    buffer = LookupBuffer.revealing([0.9] * 8, 4)
    policy = VLLMAdaptivePolicy(profile, d_max=8)
    assert policy.round_s(buffer, 2, 5) == pytest.approx(chain_round_s(profile, [LOOKUP, LOOKUP], 5, False))


def test_the_registry_builds_the_vllm_modes():
    adaptive = make_policy("vllm-adaptive", 4, profile=LINEAR, d_max=12)
    assert isinstance(adaptive, VLLMAdaptivePolicy) and adaptive.d_max == 12 and MODES["vllm-adaptive"].priced
    with pytest.raises(ValueError, match="latency profile"):
        make_policy("vllm-adaptive", 4, d_max=12)
    schedule = make_policy("vllm-schedule", 4, d_max=5)
    assert isinstance(schedule, BatchSchedulePolicy) and schedule.d_max == 5 and schedule.batch_size == 1
    assert schedule.length == min(5, schedule_length(load_schedule()["ranges"], 1))


# ---- the batch-size schedule --------------------------------------------------------------------

TABLE = {"ranges": [[1, 1, 6], [2, 4, 3], [6, 8, 1]], "chosen_on": "hand-made", "how": "a test"}


def test_the_schedule_looks_k_up_by_batch_size_as_vllm_does():
    """Inclusive ranges; batch 5 sits in a gap and takes the range before it; past the last range
    the last K; d_max caps K."""
    assert [schedule_length(TABLE["ranges"], b) for b in (1, 2, 4, 5, 6, 8, 100)] == [6, 3, 3, 3, 1, 1, 1]
    assert BatchSchedulePolicy(TABLE, 1, d_max=24).length == 6
    assert BatchSchedulePolicy(TABLE, 3, d_max=24).length == 3
    assert BatchSchedulePolicy(TABLE, 1, d_max=4).length == 4
    assert BatchSchedulePolicy([[1, 4, 0]], 2).length == 0  # K = 0: every round an AR step
    buffer = ArrayBuffer.revealing([0.5] * 12, 4)
    assert BatchSchedulePolicy(TABLE, 1, d_max=24).choose_length(buffer).d == 6
    assert buffer.blocks_extended == 1  # the second block holds drafts 5 and 6
    assert checked_ranges([[5, 8, 2], [1, 4, 3]]) == ((1, 4, 3), (5, 8, 2))  # sorted, as vLLM sorts them


@pytest.mark.parametrize(
    "ranges, words",
    [
        ([[2, 4, 3]], "start at batch size 1"),
        ([[1, 4, 3], [4, 8, 2]], "overlap"),
        ([[1, 4, -1]], "K must be >= 0"),
        ([[1, 0, 2]], "bs_lo <= bs_hi"),
        ([[1, 4]], "three integers"),
        ([[1, 4, 2.5]], "three integers"),
        ([], "non-empty list"),
    ],
)
def test_a_damaged_schedule_is_refused_with_a_reason(ranges, words):
    with pytest.raises(ScheduleError, match=words):
        BatchSchedulePolicy({"ranges": ranges}, 1)


def test_a_damaged_schedule_file_is_refused_with_a_reason(tmp_path):
    path = tmp_path / "schedule.json"
    with pytest.raises(ScheduleError, match="missing.*batch_schedule.py"):
        load_schedule(path)
    path.write_text("{not json")
    with pytest.raises(ScheduleError, match="not a readable JSON"):
        load_schedule(path)
    path.write_text(json.dumps({"ranges": [[1, 8, 4]]}))
    with pytest.raises(ScheduleError, match="chosen_on, how"):
        load_schedule(path)
    path.write_text(json.dumps(TABLE | {"ranges": [[1, 4, 3], [3, 8, 2]]}))
    with pytest.raises(ScheduleError, match=re.escape(f"{path}: batch-size ranges overlap")):
        load_schedule(path)
    path.write_text(json.dumps(TABLE | {"ranges": [[1, 8, 4]], "extra": 1}))
    assert load_schedule(path)["ranges"] == [[1, 8, 4]] and load_schedule(path)["extra"] == 1


def test_the_shipped_schedule_reads_and_says_where_it_comes_from():
    table = load_schedule()
    assert [r[:2] for r in table["ranges"]] == [[1, 1], [2, 4], [5, 8]]
    assert table["chosen_on"] and table["how"]


# ---- online calibration -------------------------------------------------------------------------


def test_the_calibration_fit_recovers_a_known_logistic():
    """q uniform on (0.02, 0.98), accepted with probability sigmoid(0.6 logit(q) - 0.4): the fit
    on 20,000 pairs finds (0.6, -0.4) within a few standard errors (about 0.02 here)."""
    rng = np.random.default_rng(0)
    q = rng.uniform(0.02, 0.98, 20_000)
    x = np.log(q / (1 - q))
    y = (rng.uniform(size=q.size) < 1 / (1 + np.exp(-(0.6 * x - 0.4)))).astype(float)
    a, b = fit_logistic(x, y)
    assert a == pytest.approx(0.6, abs=0.06) and b == pytest.approx(-0.4, abs=0.06)
    calibration = OnlineCalibration(LibraSpecPolicy(2.2, 8))
    calibration.observe(q, y)
    assert calibration.refits == 200  # every 100 pairs
    assert calibration.coef == pytest.approx((0.6, -0.4), abs=0.06)
    mapped = calibration.calibrate([0.0, 0.5, 0.9, 1.0])
    a, b = calibration.coef
    assert mapped[1] == pytest.approx(1 / (1 + math.exp(-b)))
    assert mapped[2] == pytest.approx(1 / (1 + math.exp(-(a * math.log(9) + b))))
    assert mapped[0] == 0.0 and mapped[3] == 1.0  # the endpoints keep their meaning


def test_the_calibration_is_the_identity_until_its_first_refit():
    calibration = OnlineCalibration(LibraSpecPolicy(2.2, 8))
    q = np.array([0.9, 0.8, 0.3, 0.05])
    calibration.observe([0.9] * 99, [False] * 99)  # a drafter far too sure of itself
    assert calibration.refits == 0 and np.array_equal(calibration.calibrate(q), q)
    calibration.observe([0.9], [False])  # the 100th pair: vLLM's interval
    assert calibration.refits == 1 and np.all(calibration.calibrate(q)[:2] < q[:2] - 0.2)
    calibration.reset()
    assert calibration.refits == 0 and np.array_equal(calibration.calibrate(q), q)
    kept = OnlineCalibration(LibraSpecPolicy(2.2, 8), persist=True)
    kept.observe([0.9] * 100, [False] * 100)
    kept.reset()
    assert kept.refits == 1  # vLLM's estimator lives across requests: persist keeps it


def test_the_calibration_observes_verified_drafts_up_to_the_first_rejection():
    """A round verifying d = 4 that accepted 2 observes drafts 1, 2 (accepted) and 3 (rejected);
    draft 4 was verified but its chain never reached it; one that accepted all 4 observes 4."""
    calibration = OnlineCalibration(LibraSpecPolicy(2.2, 8), refit_every=1000)
    calibration.update(record(4, 2, (0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2)))
    assert calibration._y == [1.0, 1.0, 0.0]
    assert calibration._x == pytest.approx([math.log(q / (1 - q)) for q in (0.9, 0.8, 0.7)])
    calibration.update(record(4, 4, (0.9,) * 8))
    calibration.update(record(0, 0, (0.9,) * 8))  # an AR step verifies nothing
    assert calibration._y == [1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0]


def test_the_calibrated_policy_sees_mapped_q_and_drafts_on_the_real_buffer():
    """LibraSpec at alpha 2 on q = 0.9 extends past the first block; after a refit that learned
    the drafter is far too sure of itself it rolls back inside it. Extending the view drafts the
    buffer, and the view reads nothing but the buffer's q."""
    q = [0.9] * 12
    plain = LibraSpecPolicy(2.0, 12)
    calibrated = OnlineCalibration(LibraSpecPolicy(2.0, 12), refit_every=50)
    buffer = ArrayBuffer.revealing(q, 4)
    assert calibrated.choose_length(buffer).d == plain.choose_length(ArrayBuffer.revealing(q, 4)).d > 4
    for _ in range(50):
        calibrated.update(record(2, 0, (0.9,) * 4))  # q = 0.9 and rejected: one pair a round
    assert calibrated.refits == 1
    buffer = ArrayBuffer.revealing(q, 4)
    assert calibrated.choose_length(buffer).d < 4
    view = CalibratedView(ArrayBuffer.revealing(q, 4), calibrated.calibrate)
    view.extend(1)
    assert view.buffer.blocks_extended == 1 and len(view.confidences) == 8 and view.n == 4
    assert np.allclose(view.confidences, calibrated.calibrate(q[:8]))


def test_the_calibration_restores_from_its_snapshot():
    calibration = OnlineCalibration(LibraSpecPolicy(2.2, 8), refit_every=3)
    calibration.observe([0.9, 0.5, 0.7, 0.2, 0.8], [True, False, True, False, False])
    again = OnlineCalibration(LibraSpecPolicy(2.2, 8), refit_every=3)
    again.restore(calibration.snapshot())
    assert again.snapshot() == calibration.snapshot() and again.coef == calibration.coef and again.refits == 1


def test_a_calibrated_policy_samples_the_target_exactly(v6_pair):  # noqa: F811
    """The calibration decides from the chain's q and earlier rounds' records only, so LibraSpec
    through it stays lossless: the exact output distribution of 3 tokens under top-k 2 (the
    enumeration of tests/test_exact_sampling.py), the calibration refitted after every pair and
    carried from round to round, equals the target's. Its first rounds' drafts were rejected, so
    later rounds read q mapped far down and choose shorter d than the first round did."""
    chosen = []  # (refits so far, d) of every decision

    class Logged(OnlineCalibration):
        def choose_length(self, buffer):
            decision = super().choose_length(buffer)
            chosen.append((self.refits, decision.d))
            return decision

    def make(state):
        policy = Logged(LibraSpecPolicy(3.0, 6), refit_every=1, persist=True)  # reset() keeps the pairs
        if state:
            policy.restore(state)
        return policy

    decoder = SpeculativeDecoder(v6_pair, EXACT_PROFILE, drafter="dflash")
    sampling = dict(temperature=1.0, top_k=2, lookahead=6)
    dist = output_distribution(decoder, PROMPT, "libraspec", make, 3, sampling, lambda p: p.snapshot())
    tv = total_variation(dist, topk_target(v6_pair, PROMPT, 3, 2))
    assert tv < 1e-9, f"total variation {tv:.3g}"
    first = {d for refits, d in chosen if refits == 0}
    later = {d for refits, d in chosen if refits > 0}
    assert first and later and max(later) < min(first)  # calibrated q changed the decisions
