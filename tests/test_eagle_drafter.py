"""The EAGLE-3-style drafter: a round's steps equal the training-time test's passes, its context
equals a rebuild after every round, its price, its checkpoints and its refusals."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from decoding import check_caches, generated, run
from fake_drafters import toy_sequences, trained_eagle
from profile_checks import physical

from libraspec.cost import AUTOREGRESSIVE, EAGLE, LatencyProfile, chain_round_s
from libraspec.drafters import make_drafter, round_drafting
from libraspec.engine import SpeculativeDecoder
from libraspec.models.eagle import EagleHead
from libraspec.models.registry import tiny_pair
from libraspec.modes import MODES
from libraspec.spec import RunSpec
from libraspec.train.data import IGNORE
from libraspec.train.eagle import held_apart_metrics, loss_of, make_batch
from libraspec.verify import SamplingConfig

LAYER = "unit"
PROFILE = LatencyProfile.from_linear(t0=0.05, c=0.004, draft_per_block=0.01, n=7, max_tokens=40)


@pytest.fixture(scope="module")
def pair():
    return tiny_pair(seed=3)


def features_of(pair, ids: list[int]) -> torch.Tensor:
    out = pair.target.forward(pair.target.new_cache(), ids)
    return pair.eagle.target_features(out.hidden_states)  # (1, T, L*H)


@torch.no_grad()
def test_a_rounds_steps_equal_the_training_time_test(pair):
    """Steps 1..3 of a round anchored at L (fed the true tokens) give the logits of passes 1..3 of
    `forward_train` at L, L + 1, L + 2: the training mask sees what drafting sees."""
    head = pair.eagle
    ids = torch.randint(3, pair.target.vocab_size, (24,), generator=torch.Generator().manual_seed(0)).tolist()
    feats = features_of(pair, ids)
    passes = head.forward_train(torch.tensor([ids]), feats, torch.arange(len(ids)).view(1, -1), 3)
    for anchor in (1, 9, 20):
        cache = head.new_cache()
        head.extend_context(cache, torch.tensor([ids[:anchor]]), feats[:, :anchor], 0)
        g, round_kv = cache.features[:, -1:], []
        for k in range(3):
            logits, g = head.step(cache, ids[anchor + k], g, anchor + k, round_kv)
            torch.testing.assert_close(logits, passes[k][0, anchor + k], rtol=1e-4, atol=1e-5)


@torch.no_grad()
def test_the_context_grows_and_crops_like_a_rebuild(pair):
    head = pair.eagle
    ids = list(range(5, 30))
    feats = features_of(pair, ids)
    whole = head.new_cache()
    head.extend_context(whole, torch.tensor([ids]), feats, 0)
    parts = head.new_cache()
    for a, b in ((0, 1), (1, 7), (7, 12), (12, 25)):
        head.extend_context(parts, torch.tensor([ids[a:b]]), feats[:, a:b], a)
    head.crop(parts, 12)
    head.extend_context(parts, torch.tensor([ids[12:]]), feats[:, 12:], 12)
    for have, want in zip(parts.keys + parts.values + [parts.features], whole.keys + whole.values + [whole.features]):
        torch.testing.assert_close(have, want, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="cannot append at position 3"):
        head.extend_context(parts, torch.tensor([ids[:1]]), feats[:, :1], 3)


def test_caches_equal_a_rebuild_after_every_round_in_every_mode(pair):
    """A head trained on the prompt's continuation, so rounds accept several drafts and reject the
    rest: after every round the context equals one rebuilt from the committed tokens, and the
    output equals AR's."""
    prompt = [5, 17, 42, 9]
    decoder = SpeculativeDecoder(
        dataclasses.replace(pair, eagle=trained_eagle(pair, prompts=[prompt])), PROFILE, drafter="eagle"
    )
    checked = check_caches(decoder, tolerance=1e-5)
    settings, _ = RunSpec(d_max=12).checked(1)
    reference = generated(run(decoder, prompt, "ar", None, max_new_tokens=16))
    accepted = set()
    for mode in [m for m in MODES if m != "ar"]:
        out = run(decoder, prompt, mode, MODES[mode].policy(settings, PROFILE), max_new_tokens=16, lookahead=8)
        assert generated(out) == reference, mode
        accepted |= {r.accepted for r in out}
    assert len(checked) > 30 and max(accepted) >= 2 and 0 in accepted


def test_a_round_drafts_one_token_a_step_and_prices_each_step(pair):
    drafter = make_drafter("eagle", pair)
    context = drafter.new_context()
    ids = [5, 17, 42, 9, 33]
    out = pair.target.forward(pair.target.new_cache(), ids[:-1])
    drafter.fit_context(context, ids, out.hidden_states, 0)
    buffer = drafter.start_round(context, ids, SamplingConfig())
    buffer.ensure(4)
    assert buffer.n == 1 and len(buffer.tokens) == 4 and buffer.steps_run(4) == [EAGLE] * 4
    assert all(0 < q <= 1 for q in buffer.confidences)
    tokens, probs = buffer.candidates(2, 3)
    assert tokens[0] == buffer.tokens[2] and probs == sorted(probs, reverse=True)
    # priced: d head steps, d + 1 verified rows, the head's upkeep
    assert round_drafting("eagle") == AUTOREGRESSIVE
    profile = dataclasses.replace(PROFILE, eagle_s=0.002, eagle_fit_s=0.003)
    want = 4 * 0.002 + profile.verify_time(5) + 0.003
    assert profile.round_time(4, AUTOREGRESSIVE) == pytest.approx(want)
    assert chain_round_s(profile, buffer.steps_run(4), 4, True) == pytest.approx(want)
    prices = [profile.round_time(d, AUTOREGRESSIVE) for d in range(1, 30)]
    assert all(b > a for a, b in zip(prices, prices[1:]))  # a head step is never free


def test_a_profile_without_head_timings_refuses_to_price_a_head_round():
    bare = dataclasses.replace(PROFILE, eagle_s=0.0)
    with pytest.raises(ValueError, match="no timing of the EAGLE-style head"):
        bare.round_time(3, AUTOREGRESSIVE)


def test_a_pair_without_a_head_says_how_to_get_one(pair):
    with pytest.raises(ValueError, match="no EAGLE-style head: train one with `scripts/train_eagle.sh`"):
        make_drafter("eagle", dataclasses.replace(pair, eagle=None))


def test_checkpoints_round_trip_in_bfloat16_and_damage_is_named(pair, tmp_path):
    head = pair.eagle
    head.save_pretrained(tmp_path / "head")
    loaded = EagleHead.from_pretrained(tmp_path / "head", pair.target.model)
    for (name, a), (_, b) in zip(head.state_dict().items(), loaded.state_dict().items()):
        if a.is_floating_point():
            torch.testing.assert_close(b, a.to(torch.bfloat16).to(a.dtype), msg=name)
        else:
            assert torch.equal(a, b), name
    (tmp_path / "head" / "config.json").write_text('{"architectures": ["Qwen3"]}')
    with pytest.raises(ValueError, match="not an eagle head config"):
        EagleHead.from_pretrained(tmp_path / "head", pair.target.model)


def test_training_raises_acceptance_on_the_tiny_pair(pair):
    """60 steps of the training-time test on the tiny target's own text (which soon repeats one token):
    a_1 and tau_3 of greedy rounds on that text rise from the random head's (a trainer that learns
    nothing, or a metric that scores the wrong position, fails)."""
    model = pair.target.model  # the fixture's head is shared: train a copy
    head = EagleHead(pair.eagle.config, model.get_input_embeddings(), model.get_output_embeddings())
    head.load_state_dict(pair.eagle.state_dict())
    train = toy_sequences(pair, 9)
    held = train[:3]
    lookup = torch.arange(pair.target.vocab_size)
    before = held_apart_metrics(head, held, lookup, 3)
    params = [p for p in head.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=3e-3)
    for _ in range(60):
        batch = make_batch(train, [(0, len(s.ids) - 2) for s in train], lookup, 3)
        loss, _ = loss_of(head, batch, 3, 0.5, 0.8)
        opt.zero_grad()
        loss.backward()
        opt.step()
    after = held_apart_metrics(head, held, lookup, 3)
    assert after["a"][0] > before["a"][0] + 0.5 and after["tau_3"] > before["tau_3"] + 1.0
    batch = make_batch(held, [(0, 10)] * len(held), lookup, 3)
    assert batch["scored"][2].sum() < batch["scored"][0].sum()  # pass 3 scores only anchors with room
    assert (batch["hard"] != IGNORE).all()


def test_a_pair_with_a_head_has_its_steps_timed_and_its_own_profile_file(pair):
    from libraspec.profiling import measure_profile, profile_path

    timed = measure_profile(pair, max_tokens=4, max_blocks=1, repeats=3, contexts=())
    assert timed.eagle_s > 0 and timed.eagle_fit_s > 0
    physical(timed)  # head rounds included: one more draft never costs less
    assert timed.round_time(3, AUTOREGRESSIVE) > timed.round_time(2, AUTOREGRESSIVE)
    bare = dataclasses.replace(pair, eagle=None, eagle_id="")
    assert measure_profile(bare, max_tokens=4, max_blocks=1, repeats=3, contexts=()).eagle_s == 0.0
    assert profile_path(bare) != profile_path(pair)  # a profile measured without the head is not reused
