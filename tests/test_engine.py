"""Engine invariants: lossless greedy decoding for every policy and drafter, exact cache
lengths, EOS / max_new_tokens / context limits, clear errors for bad input."""

from __future__ import annotations

import pytest
import torch
from decoding import check_caches, generated, run, with_drafter
from fake_drafters import GreedyOracleDrafter, PartlyRightModule

from libraspec.cost import LatencyProfile
from libraspec.drafters import DRAFTERS
from libraspec.engine import DecodeConfig, SpeculativeDecoder, race
from libraspec.models.registry import tiny_pair
from libraspec.modes import MODES
from libraspec.policy import FailFastPolicy, G4Policy, LibraSpecPolicy, StaticPolicy
from libraspec.records import summarize
from libraspec.spec import RunSpec

LAYER = "unit"  # tests/conftest.py

torch.set_num_threads(1)
PROFILE = LatencyProfile.from_linear(t0=0.05, c=0.004, draft_per_block=0.01, n=7, max_tokens=40)


def policies(n: int, d_max: int = 20):
    return {
        "static-1": ("static", StaticPolicy(1)),
        "static-n": ("static", StaticPolicy(n)),
        "libraspec": ("libraspec", LibraSpecPolicy(2.2, d_max)),
        "g4": ("g4", G4Policy(4, d_max)),
        "failfast": ("failfast", FailFastPolicy(0.2, 3, d_max)),
        "oracle": ("oracle", None),
    }


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def pair(request):
    return tiny_pair(request.param, seed=3, dtype=torch.float64)


def prompts(pair, count: int):
    gen = torch.Generator().manual_seed(11)
    return [
        torch.randint(3, pair.target.vocab_size, (int(4 + 3 * i % 17),), generator=gen).tolist() for i in range(count)
    ]


@pytest.mark.parametrize("drafter", DRAFTERS)
def test_greedy_lossless_every_mode_and_drafter(pair, drafter):
    """Every mode of the registry (trees included) with every drafter, the block drafter being the
    trained architecture with random weights: the output equals AR over 3 prompts of 4, 7 and 10
    tokens."""
    decoder = SpeculativeDecoder(pair, PROFILE, drafter=drafter)
    settings, _ = RunSpec(d_max=20).checked(pair.n)
    modes = [name for name in MODES if name != "ar"]
    for prompt in prompts(pair, 3):
        reference = generated(run(decoder, prompt, "ar", None, max_new_tokens=16))
        assert len(reference) == 16
        for mode in modes:
            out = generated(
                run(
                    decoder,
                    prompt,
                    mode,
                    MODES[mode].policy(settings, decoder.profile),
                    max_new_tokens=16,
                    lookahead=20,
                )
            )
            assert out == reference, (drafter, mode)
        assert generated(run(decoder, prompt, "static", StaticPolicy(1), max_new_tokens=16)) == reference


@pytest.mark.parametrize("wrong", [False, True])
def test_greedy_lossless_edge_drafters(pair, wrong):
    """Always-right and always-wrong drafters stay lossless; tau is d+1 or exactly 1. (The wrong
    drafter commits one token a round after verifying up to 20: 16 tokens are 16 rounds.)"""
    drafter = GreedyOracleDrafter(pair.target, block_size=8, wrong=wrong)
    decoder = SpeculativeDecoder(with_drafter(pair, drafter), PROFILE)
    new = 16 if wrong else 40
    for prompt in prompts(pair, 3):
        reference = generated(run(decoder, prompt, "ar", None, max_new_tokens=new))
        for label, (mode, policy) in policies(7, d_max=20).items():
            records = run(decoder, prompt, mode, policy, max_new_tokens=new, lookahead=20)
            assert generated(records) == reference, label
            for r in records[:-1]:
                assert r.accepted == (0 if wrong else r.chosen_length), label
                assert r.tau == r.accepted + 1


def test_libraspec_reaches_d_max_with_certain_drafts(pair):
    drafter = GreedyOracleDrafter(pair.target, block_size=8)
    decoder = SpeculativeDecoder(with_drafter(pair, drafter), PROFILE)
    records = run(decoder, prompts(pair, 1)[0], "libraspec", LibraSpecPolicy(2.2, 20), max_new_tokens=60)
    assert records[0].chosen_length == 20
    assert records[0].blocks_drafted == 3  # 7 + 7 + 7 >= 20, and no more
    assert records[0].tau == 21
    assert [s.d_after for s in records[0].policy_steps][-1] == 20


@pytest.mark.parametrize("right_for", [None, 2])
def test_caches_match_committed_tokens_after_every_round(pair, right_for):
    """After every round both caches hold len(ids) - 1 entries and equal a rebuild from the committed
    tokens (no K/V or features of rejected drafts, no shifted positions), in every chain mode."""
    if right_for is not None:  # accepts part of each draft: the rejected tail must leave no trace
        pair = with_drafter(pair, PartlyRightModule(pair, right_for))
    decoder = SpeculativeDecoder(pair, PROFILE)
    checked = check_caches(decoder, tolerance=1e-9)
    for label, (mode, policy) in policies(pair.n).items():
        run(decoder, prompts(pair, 1)[0], mode, policy, max_new_tokens=16, annotate_oracle=True)
    assert len(checked) > 20


def test_eos_inside_a_block_stops_where_ar_stops(pair):
    drafter = GreedyOracleDrafter(pair.target, block_size=8)
    prompt = prompts(pair, 2)[1]
    plain = SpeculativeDecoder(with_drafter(pair, drafter), PROFILE)
    free = generated(run(plain, prompt, "ar", None, max_new_tokens=30))
    stop = free[4]  # make the 5th generated token a stop token
    decoder = SpeculativeDecoder(with_drafter(pair, drafter, frozenset({stop})), PROFILE)
    reference = generated(run(decoder, prompt, "ar", None, max_new_tokens=30))
    assert reference == free[: free.index(stop) + 1]
    for label, (mode, policy) in policies(7).items():
        records = run(decoder, prompt, mode, policy, max_new_tokens=30)
        assert generated(records) == reference, label
        assert records[-1].finished and records[-1].committed_tokens[-1] == stop


def test_max_new_tokens_inside_a_block(pair):
    drafter = GreedyOracleDrafter(pair.target, block_size=8)
    decoder = SpeculativeDecoder(with_drafter(pair, drafter), PROFILE)
    prompt = prompts(pair, 1)[0]
    for limit in (1, 2, 10, 17):
        reference = generated(run(decoder, prompt, "ar", None, max_new_tokens=limit))
        for label, (mode, policy) in policies(7).items():
            records = run(decoder, prompt, mode, policy, max_new_tokens=limit)
            assert generated(records) == reference and len(reference) == limit, (label, limit)
            assert records[-1].finished and records[-1].cumulative_tokens == limit


def test_prompt_at_the_context_limit(pair):
    decoder = SpeculativeDecoder(pair, PROFILE)
    window = pair.target.max_positions
    prompt = (prompts(pair, 1)[0] * window)[: window - 1]
    for label, (mode, policy) in policies(pair.n).items():
        records = run(decoder, prompt, mode, policy, max_new_tokens=8)
        assert len(generated(records)) == 1 and records[-1].finished, label
    with pytest.raises(ValueError, match="context window"):
        run(decoder, prompt + [5], "libraspec", LibraSpecPolicy(2.2, 20), max_new_tokens=8)


def test_the_context_window_stops_every_mode_where_ar_stops(pair):
    """A drafter that is always right near the end of the window: no mode commits past it."""
    drafter = GreedyOracleDrafter(pair.target, block_size=8)
    decoder = SpeculativeDecoder(with_drafter(pair, drafter), PROFILE)
    window = pair.target.max_positions
    for room in (1, 2, 3, 9):
        prompt = (prompts(pair, 1)[0] * window)[: window - room]
        reference = generated(run(decoder, prompt, "ar", None, max_new_tokens=20))
        assert len(reference) == room
        for label, (mode, policy) in policies(7).items():
            records = run(decoder, prompt, mode, policy, max_new_tokens=20)
            assert generated(records) == reference and records[-1].finished, (label, room)


def test_bad_input_gives_clear_errors(pair):
    decoder = SpeculativeDecoder(pair, PROFILE)
    with pytest.raises(ValueError, match="empty"):
        run(decoder, [], "ar", None)
    with pytest.raises(ValueError, match="empty"):
        pair.encode_prompt("   \n")
    with pytest.raises(ValueError, match="context window"):
        run(decoder, [5, 6], "oracle", None, lookahead=10_000)
    with pytest.raises(ValueError, match="context window"):
        run(decoder, [5, 6], "libraspec", LibraSpecPolicy(2.2, 10_000))
    with pytest.raises(ValueError, match="unknown mode"):
        run(decoder, [5, 6], "turbo", None)
    with pytest.raises(ValueError, match="max_new_tokens"):
        DecodeConfig(max_new_tokens=0)
    with pytest.raises(ValueError, match="temperature"):
        run(decoder, [5, 6], "ar", None, temperature=-1.0)
    other = tiny_pair("qwen3" if pair.name == "tiny-llama" else "llama", seed=1, dtype=torch.float64)
    small_vocab = tiny_pair("llama", dtype=torch.float64)
    small_vocab.drafter.config.vocab_size = 100
    with pytest.raises(ValueError, match="vocabulary"):
        SpeculativeDecoder(with_drafter(pair, small_vocab.drafter), PROFILE)
    other.drafter.config.hidden_size = 32
    with pytest.raises(ValueError, match="hidden size"):
        SpeculativeDecoder(with_drafter(pair, other.drafter), PROFILE)


def test_oracle_annotation_changes_nothing_and_race_orders_by_clock(pair):
    decoder = SpeculativeDecoder(pair, PROFILE)
    prompt = prompts(pair, 1)[0]
    plain = run(decoder, prompt, "libraspec", LibraSpecPolicy(2.2, 20), max_new_tokens=16, temperature=0.8, seed=5)
    annotated = run(
        decoder,
        prompt,
        "libraspec",
        LibraSpecPolicy(2.2, 20),
        max_new_tokens=16,
        temperature=0.8,
        seed=5,
        annotate_oracle=True,
    )
    assert generated(plain) == generated(annotated)
    assert [r.chosen_length for r in plain] == [r.chosen_length for r in annotated]
    assert all(r.oracle_length is not None for r in annotated[:-1])
    events = list(
        race(
            decoder,
            prompt,
            {
                "static": ("static", StaticPolicy(3)),
                "libraspec": ("libraspec", LibraSpecPolicy(2.2, 20)),
                "oracle": ("oracle", None),
            },
            DecodeConfig(max_new_tokens=12),
        )
    )
    by_mode, clocks = {}, {"static": 0.0, "libraspec": 0.0, "oracle": 0.0}
    for label, record in events:  # each event comes from the running mode whose measured clock is furthest behind
        assert clocks[label] == min(clocks.values()), (label, clocks)
        clocks[label] = record.cumulative_s
        if record.finished:
            del clocks[label]
        by_mode.setdefault(label, []).append(record)
    assert set(by_mode) == {"static", "libraspec", "oracle"}
    assert all(recs[-1].finished for recs in by_mode.values())
    texts = {label: generated(recs) for label, recs in by_mode.items()}
    assert len({tuple(t) for t in texts.values()}) == 1
    s = summarize(by_mode["libraspec"], run(decoder, prompt, "ar", None, max_new_tokens=12))
    assert s.tokens == 12 and s.speedup_measured > 0 and s.speedup_modeled > 0


def test_modeled_times_price_each_forward_after_its_context(pair):
    """A profile with a context term prices every round after the committed tokens it starts
    from: against the same profile without the term, a chain round's modeled time differs by the
    term of its d + 1 rows, an AR step's by that of one row, at the round's start position."""
    import dataclasses

    priced = dataclasses.replace(PROFILE, context_len=8, context_k=(1, 21), context_slope_s=(1e-4, 5e-4))
    prompt = prompts(pair, 1)[0]
    for mode, policy in (("ar", None), ("static", StaticPolicy(4)), ("libraspec", LibraSpecPolicy(2.2, 20))):
        flat = run(SpeculativeDecoder(pair, PROFILE), prompt, mode, policy, max_new_tokens=24)
        rounds = run(SpeculativeDecoder(pair, priced), prompt, mode, policy, max_new_tokens=24)
        assert [r.committed_tokens for r in rounds] == [r.committed_tokens for r in flat]
        for a, b in zip(flat, rounds):
            rows = 1 if mode == "ar" else a.chosen_length + 1
            assert b.modeled_s - a.modeled_s == pytest.approx(priced.context_s(rows, a.start_position)), mode
        assert rounds[-1].start_position > len(prompt)  # the context grew over the run


def test_a_policy_is_timed_without_the_blocks_it_asks_for(monkeypatch):
    """Algorithm 1 drafts while it chooses (line 12): the policy's clock stops while the buffer
    drafts, so the policy's seconds and the drafting seconds part exactly (a fake clock: each
    drafting step takes 5 s, the policy 1 s before asking for two blocks and 0.5 s after)."""
    import time

    from libraspec.drafters.base import DraftBuffer
    from libraspec.engine import _timed_choice
    from libraspec.policy import Decision
    from libraspec.verify import SamplingConfig

    now = [100.0]
    monkeypatch.setattr(time, "perf_counter", lambda: now[0])

    class Buffer(DraftBuffer):
        def _step(self):
            now[0] += 5.0
            return [1, 2], [0.9, 0.8], None, "dflash"

    class Policy:
        def choose_length(self, buffer):
            now[0] += 1.0
            buffer.extend(2)
            now[0] += 0.5
            return Decision(4)

    buffer = Buffer(2, 8, SamplingConfig())
    decision, policy_s = _timed_choice(Policy(), buffer, buffer)
    assert decision.d == 4 and policy_s == 1.5 and buffer.seconds == 10.0
    assert buffer.policy_clock is None  # the clock goes with the choice
    buffer.extend(1)  # drafting outside a choice touches no clock
    assert buffer.seconds == 15.0


@pytest.mark.parametrize("mode", ["static", "libraspec", "oracle", "ddtree"])
def test_a_record_says_which_part_of_its_modeled_time_is_drafting(pair, mode):
    """modeled_s = modeled_draft_s + the verification + the upkeep, every round (AR: no drafting),
    so lock-step replay reprices the verification without subtracting anything."""
    decoder = SpeculativeDecoder(pair, PROFILE)
    policy = MODES[mode].policy(RunSpec(d_max=14, node_budget=8).checked(decoder.n).spec)
    records = run(decoder, [1, 40, 50, 60], mode, policy, max_new_tokens=12, lookahead=14)
    for r in records:
        verify = PROFILE.tree_verify_time(r.tree_size + 1) if r.tree_size else PROFILE.verify_time(r.chosen_length + 1)
        upkeep = PROFILE.fit_s if decoder.drafter.needs_features else 0.0
        assert r.modeled_draft_s == pytest.approx(PROFILE.draft_time(r.blocks_drafted)) and r.modeled_draft_s > 0
        assert r.modeled_s == pytest.approx(r.modeled_draft_s + verify + upkeep)
    assert all(r.modeled_draft_s == 0.0 for r in run(decoder, [1, 40, 50, 60], "ar", None, max_new_tokens=4))
