"""libraspec/priced.py (mode libraspec-priced): the marginal criterion at alpha = V / c from the price
list, checked against numbers worked by hand on made-up profiles and a brute-force argmax."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from libraspec.analysis.stepper import ArrayBuffer
from libraspec.cost import LatencyProfile
from libraspec.engine import DecodeConfig, SpeculativeDecoder
from libraspec.modes import MODES, make_policy
from libraspec.policy import LibraSpecPolicy
from libraspec.priced import PricedLibraSpecPolicy
from libraspec.records import RoundRecord

LAYER = "unit"  # tests/conftest.py

# verify k rows: 0.05 + 0.004 k s; a block-diffusion pass 0.01 s (b passes: 0.01 b); no upkeep, no look-up cost
LINEAR = LatencyProfile.from_linear(t0=0.05, c=0.004, draft_per_block=0.01, n=4, max_tokens=40)
STEEP = LatencyProfile.from_linear(t0=0.05, c=0.016, draft_per_block=0.01, n=4, max_tokens=40)
Q = [0.9, 0.8, 0.7, 0.6, 0.6, 0.5, 0.5, 0.4, 0.4, 0.3, 0.3, 0.2, 0.2, 0.1, 0.1, 0.1]  # four blocks of n = 4


def record(chosen: int, tau: int, modeled_s: float, start: int, sources: str = "lookup") -> RoundRecord:
    drafted = 4 * max(1, -(-chosen // 4)) if chosen else 0
    return RoundRecord(
        mode="libraspec-priced",
        round_index=0,
        start_position=start,
        draft_tokens=(0,) * drafted,
        confidences=(0.5,) * drafted,
        blocks_drafted=drafted // 4,
        policy_steps=(),
        eps_bounds=(),
        chosen_length=chosen,
        accepted=tau - 1,
        committed_tokens=(0,) * tau,
        bonus_token=0,
        oracle_length=None,
        draft_s=0.0,
        policy_s=0.0,
        verify_s=0.0,
        modeled_s=modeled_s,
        cumulative_tokens=tau,
        cumulative_s=0.0,
        cumulative_modeled_s=modeled_s,
        draft_sources=(sources,) * drafted,
    )


def test_the_prior_alpha_worked_by_hand():
    """Before any round: the prior pseudo-round drafts one pass (0.01) and verifies n + 1 = 5 rows
    (0.05 + 5 x 0.004 = 0.07), 0.08 s for 2 tokens: V = 0.04 s. c at d = n = 4 is R(8) - R(4) over 4
    drafts: 4 rows more (0.016) and a second pass (0.01), 0.0065 s a draft. alpha = 0.04 / 0.0065."""
    policy = PricedLibraSpecPolicy(LINEAR, 24)
    assert policy.value_s() == pytest.approx(0.04)
    assert policy.draft_price_s() == pytest.approx(0.004 + 0.01 / 4)
    assert policy.alpha == pytest.approx(0.04 / 0.0065)  # 6.1538...
    assert policy.alpha == pytest.approx(6.153846, abs=1e-6)


def test_on_a_linear_profile_alpha_is_t_over_tau_c():
    """After a look-up round (a look-up step costs 0 here), c is the profile's own cost per row, so
    alpha = T / (tau c) with T / tau the modeled seconds per committed token of the rounds so far,
    the prior's included: (0.08 + 0.07) / (2 + 2) / 0.004 = 9.375."""
    policy = PricedLibraSpecPolicy(LINEAR, 24)
    policy.update(record(chosen=3, tau=2, modeled_s=0.07, start=10))
    assert policy.value_s() == pytest.approx(0.15 / 4)
    assert policy.draft_price_s() == pytest.approx(0.004)
    assert policy.alpha == pytest.approx(9.375)
    policy.update(record(chosen=5, tau=4, modeled_s=0.09, start=12))  # V = 0.24 / 8
    assert policy.alpha == pytest.approx(0.03 / 0.004)


def test_an_ar_step_moves_v_and_the_context_but_not_the_length():
    policy = PricedLibraSpecPolicy(LINEAR, 24)
    policy.update(record(chosen=3, tau=2, modeled_s=0.07, start=10))
    policy.update(record(chosen=0, tau=1, modeled_s=0.054, start=12))  # an AR step: nothing drafted
    assert policy.value_s() == pytest.approx((0.08 + 0.07 + 0.054) / 5)
    assert policy.prior_now()[3:] == (3, 13, "lookup")  # length 3 and its drafter kept; context 12 + 1
    assert policy.alpha == pytest.approx((0.204 / 5) / 0.004)


def test_a_drafting_step_is_priced_as_the_last_round_drafted():
    """The window of n drafts after d crosses one block: its step costs what the round's drafter
    charges, a block-diffusion pass (the next pass: 0.02 - 0.01) or a look-up step (here 0.002),
    spread over the n = 4 drafts."""
    profile = dataclasses.replace(LINEAR, lookup_s=0.002)
    by_lookup, by_pass = PricedLibraSpecPolicy(profile, 24), PricedLibraSpecPolicy(profile, 24)
    by_lookup.update(record(chosen=3, tau=2, modeled_s=0.07, start=10, sources="lookup"))
    by_pass.update(record(chosen=3, tau=2, modeled_s=0.07, start=10, sources="dflash"))
    assert by_lookup.draft_price_s() == pytest.approx(0.004 + 0.002 / 4)
    assert by_pass.draft_price_s() == pytest.approx(0.004 + 0.01 / 4)
    assert by_pass.alpha < by_lookup.alpha


def test_c_is_priced_after_the_context_the_round_starts_from():
    """With a context term, c is the mean marginal price of verify_time(k, L) at the context L = the
    last round's start + its tau (the public verify_time, whatever the term's shape)."""
    profile = dataclasses.replace(LINEAR, context_len=8, context_k=(1, 21), context_slope_s=(1e-4, 5e-4))
    policy = PricedLibraSpecPolicy(profile, 24)
    policy.update(record(chosen=3, tau=2, modeled_s=0.07, start=300))
    at = 302
    by_hand = (profile.verify_time(3 + 4 + 1, at) - profile.verify_time(3 + 1, at)) / 4  # look-up: no step price
    assert policy.draft_price_s() == pytest.approx(by_hand)
    flat = PricedLibraSpecPolicy(LINEAR, 24)
    flat.update(record(chosen=3, tau=2, modeled_s=0.07, start=300))
    assert policy.draft_price_s() > flat.draft_price_s() + 1e-6  # the term's slope grows with k: it mattered


def brute_force(policy: PricedLibraSpecPolicy, q, blocks: int, net: bool = False):
    """argmax_d V * sum_{j<=d} q_1...q_j - R(d) over the d the `blocks` drafted blocks reach, each d
    paying every drafted block; ties to the shorter d (`net`: the best value instead)."""
    value, best, top = policy.value_s(), None, None
    for d in range(1, min(blocks * 4, policy.d_max) + 1):
        gain = sum(float(torch.tensor(q[:j]).prod()) for j in range(1, d + 1))
        mine = value * gain - policy.round_s(d, blocks)
        if top is None or mine > top + 1e-12:
            best, top = d, mine
    return top if net else best


def decide(policy, q):
    buffer = ArrayBuffer.revealing(q, 4)
    return policy.choose_length(buffer), 1 + buffer.blocks_extended


def test_steeper_verification_gives_a_smaller_alpha_and_a_shorter_d():
    """STEEP verifies at 0.016 s a row: V = (0.01 + 0.05 + 5 x 0.016) / 2 = 0.07, c = 0.016 + 0.0025,
    alpha = 3.78 against LINEAR's 6.15; on the same confidences the steeper price list stops earlier."""
    cheap, steep = PricedLibraSpecPolicy(LINEAR, 24), PricedLibraSpecPolicy(STEEP, 24)
    assert steep.alpha == pytest.approx(0.07 / 0.0185)
    assert steep.alpha < cheap.alpha
    sure = [0.8] * 16
    (cheap_decision, cheap_blocks), (steep_decision, steep_blocks) = decide(cheap, sure), decide(steep, sure)
    assert cheap_decision.d == brute_force(cheap, sure, cheap_blocks)
    assert steep_decision.d == brute_force(steep, sure, steep_blocks)
    assert steep_decision.d < cheap_decision.d


def test_the_marginal_rule_worked_by_hand():
    """STEEP, the prior V = 0.07, R(d) = 0.01 ceil(d / 4) + 0.05 + 0.016 (d + 1), P = 0.9, 0.72, 0.504,
    0.3024, 0.18144, ...: net(d) = V sum P - R(d) = -0.029, 0.0054, 0.02468, 0.029848 (d = 4), then
    0.0165 at d = 5 (its pass). The second block is drafted (two drafts at P_4 = 0.3024 could be worth
    0.07 x (2.4264 + 0.6048) - R(6) = 0.03018 > 0.029848) but does not pay; a third is not drafted.
    Algorithm 1 at the same alpha (3.78) verifies 8."""
    policy = PricedLibraSpecPolicy(STEEP, 24)
    buffer = ArrayBuffer.revealing(Q, 4)
    decision = policy.choose_length(buffer)
    assert decision.d == 4 and buffer.blocks_extended == 1 and decision.alpha == pytest.approx(0.07 / 0.0185)
    assert decision.eps_bounds == () and decision.steps == ()  # no Algorithm 1 bounds to show
    assert decision.capped(3, Q).eps_bounds == ()
    assert LibraSpecPolicy(policy.alpha, 24).choose_length(ArrayBuffer.revealing(Q, 4)).d == 8


@pytest.mark.parametrize("profile", [LINEAR, STEEP], ids=["linear", "steep"])
def test_the_decision_is_the_argmax_of_the_priced_net_value(profile):
    """The policy's d is the brute-force argmax over the confidences, before and after rounds, and it
    never drafts a block that could not pay (the brute force over every drafted block agrees)."""
    policy = PricedLibraSpecPolicy(profile, 24)
    for past in (None, record(chosen=5, tau=3, modeled_s=0.1, start=20, sources="dflash")):
        if past is not None:
            policy.update(past)
        for q in (Q, [0.8] * 16, [0.99] * 8 + [0.2] * 8, [0.05] * 16, [0.9] * 4 + [0.2] * 12):
            ours, blocks = decide(policy, q)
            assert ours.d == brute_force(policy, q, blocks) and ours.alpha == policy.alpha, q
            if blocks < 4:  # where it stopped drafting, one block more could not have paid
                assert brute_force(policy, q, blocks + 1, net=True) <= brute_force(policy, q, blocks, net=True) + 1e-12


def test_a_drafted_block_is_paid_whatever_d():
    """LINEAR, q = 0.9 x 4 then 0.2: the second block could pay (four drafts at P_4 = 0.6561 would be
    worth 0.04 x 4 x 0.6561 more than their 0.016 + 0.01), so it is drafted; then both blocks are paid
    whatever d, and a fifth draft (P_5 = 0.131, worth 0.0052) beats its 0.004 row: d = 5. Priced as if
    d = 4 saved the second pass, the rule would stop at 4."""
    decision, blocks = decide(PricedLibraSpecPolicy(LINEAR, 24), [0.9] * 4 + [0.2] * 12)
    assert (decision.d, blocks) == (5, 2)


def test_reset_restores_the_prior_and_prior_now_continues_a_run():
    policy = PricedLibraSpecPolicy(LINEAR, 24)
    fresh = PricedLibraSpecPolicy(LINEAR, 24)
    policy.update(record(chosen=9, tau=5, modeled_s=0.12, start=40, sources="dflash"))
    assert policy.alpha != pytest.approx(fresh.alpha)
    continued = PricedLibraSpecPolicy(LINEAR, 24, *policy.prior_now())
    assert continued.alpha == pytest.approx(policy.alpha)
    assert continued.draft_price_s() == pytest.approx(policy.draft_price_s())
    policy.reset()
    assert policy.alpha == fresh.alpha and policy.prior_now() == fresh.prior_now()
    assert policy.choose_length(ArrayBuffer.revealing(Q, 4)) == fresh.choose_length(ArrayBuffer.revealing(Q, 4))


def test_the_registry_builds_it_from_the_decoders_profile():
    mode = MODES["libraspec-priced"]
    assert mode.priced and mode.kind == "policy" and mode.knobs == ("d_max",)
    policy = make_policy("libraspec-priced", 4, profile=LINEAR, d_max=12)
    assert isinstance(policy, PricedLibraSpecPolicy) and policy.d_max == 12 and policy.profile is LINEAR
    with pytest.raises(ValueError, match="latency profile"):
        make_policy("libraspec-priced", 4, d_max=12)
    with pytest.raises(ValueError, match="prior_tau"):
        PricedLibraSpecPolicy(LINEAR, 12, prior_tau=0.5)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_each_rounds_alpha_comes_from_the_earlier_rounds_and_the_records_show_it(temperature):
    """On the engine (tiny pair, its random block drafter): round r's recorded alpha is that of a fresh
    policy brought up to date with rounds 0..r-1 and nothing else, and its d is Algorithm 1's at that
    alpha on the round's chain confidences (greedy output equals AR's elsewhere: tests/test_engine.py)."""
    from libraspec.models.registry import tiny_pair

    torch.set_num_threads(1)
    pair = tiny_pair("llama", seed=3, dtype=torch.float64)
    profile = LatencyProfile.from_linear(t0=0.05, c=0.004, draft_per_block=0.01, n=pair.n, max_tokens=70)
    decoder = SpeculativeDecoder(pair, profile)
    policy = make_policy("libraspec-priced", pair.n, profile=profile, d_max=20)
    config = DecodeConfig(max_new_tokens=24, temperature=temperature, seed=4)
    rounds = list(decoder.run([5, 17, 33, 17, 5, 9], "libraspec-priced", policy, config))
    assert len(rounds) > 2
    alphas = []
    for r, rec in enumerate(rounds):
        replayed = PricedLibraSpecPolicy(profile, 20)
        for past in rounds[:r]:
            replayed.update(past)
        assert rec.alpha == pytest.approx(replayed.alpha, rel=1e-12), r
        d = LibraSpecPolicy(replayed.alpha, 20).choose_length(ArrayBuffer.revealing(rec.confidences, pair.n)).d
        assert rec.chosen_length == d or (rec.finished and rec.chosen_length < d), r  # the last round: cut to room
        alphas.append(rec.alpha)
    assert len(set(alphas)) > 1  # alpha moved with the rounds
