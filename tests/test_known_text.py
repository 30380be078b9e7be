"""The oracle's look-ahead read from a known greedy text (DecodeConfig.greedy_text): the same d*,
tree oracle and output as a look-ahead verified on the target, without the target forward; a
text that turns out wrong is dropped; misuse is refused."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from decoding import generated

from libraspec.cost import LatencyProfile
from libraspec.drafters import DRAFTERS
from libraspec.engine import DecodeConfig, SpeculativeDecoder
from libraspec.models.registry import tiny_pair
from libraspec.modes import MODES
from libraspec.spec import RunSpec

LAYER = "unit"  # tests/conftest.py

torch.set_num_threads(1)
PROFILE = LatencyProfile.from_linear(t0=0.05, c=0.004, draft_per_block=0.01, n=7, max_tokens=40)
FIELDS = ("committed_tokens", "chosen_length", "accepted", "oracle_length", "oracle_tree_size", "draft_tokens")


@pytest.fixture(scope="module")
def pair():
    return tiny_pair("llama", seed=3, dtype=torch.float64)


def decode(decoder, prompt, mode, config):
    settings, _ = RunSpec(d_max=20).checked(decoder.n)
    policy = MODES[mode].policy(settings, decoder.profile) if MODES[mode].kind in ("policy", "tree") else None
    return list(decoder.run(prompt, mode, policy, config))


class CountingForwards:
    """Counts the target's forwards (chains and trees) while installed."""

    def __init__(self, target):
        self.target, self.calls = target, 0

    def __enter__(self):
        self.saved = self.target.forward, self.target.forward_tree
        for name, original in zip(("forward", "forward_tree"), self.saved):
            setattr(self.target, name, self._counted(original))
        return self

    def _counted(self, original):
        def call(*args, **kwargs):
            self.calls += 1
            return original(*args, **kwargs)

        return call

    def __exit__(self, *exc):
        self.target.forward, self.target.forward_tree = self.saved


@pytest.mark.parametrize("drafter", DRAFTERS)
def test_known_text_gives_the_verified_look_ahead_without_its_forward(pair, drafter):
    """Every mode but AR, annotated: the records equal those of a look-ahead verified on the
    target, field by field, and every round with a look-ahead runs one target forward fewer."""
    decoder = SpeculativeDecoder(pair, PROFILE, drafter=drafter)
    prompt = [5, 17, 42, 9, 33]
    config = DecodeConfig(max_new_tokens=16, lookahead=20, annotate_oracle=True)
    text = tuple(generated(decode(decoder, prompt, "ar", DecodeConfig(max_new_tokens=16))))
    for mode in [m for m in MODES if m != "ar"]:
        with CountingForwards(pair.target) as verified:
            plain = decode(decoder, prompt, mode, config)
        with CountingForwards(pair.target) as read:
            known = decode(decoder, prompt, mode, dataclasses.replace(config, greedy_text=text))
        assert len(known) == len(plain), mode
        for a, b in zip(plain, known):
            assert [getattr(a, f) for f in FIELDS] == [getattr(b, f) for f in FIELDS], (mode, a.round_index)
        look_aheads = sum(r.oracle_length is not None for r in plain)
        assert look_aheads > 0, mode
        assert verified.calls - read.calls == look_aheads, mode


def test_a_wrong_text_is_dropped_and_the_output_stays_the_targets(pair):
    """A known text that leaves the target's from token 6 on: the output is still AR's
    (verification never reads the text), and once the committed text has left it, the look-ahead
    is verified on the target again: static rounds start where they would anyway, and each one
    past the divergence carries the plain annotation's d*."""
    decoder = SpeculativeDecoder(pair, PROFILE, drafter="lookup")
    prompt = [5, 17, 42, 9, 33]
    truth = generated(decode(decoder, prompt, "ar", DecodeConfig(max_new_tokens=24)))
    wrong = truth[:6] + [(t + 1) % pair.target.vocab_size for t in truth[6:]]
    config = DecodeConfig(max_new_tokens=24, lookahead=20, annotate_oracle=True)
    plain = decode(decoder, prompt, "static", config)
    misled = decode(decoder, prompt, "static", dataclasses.replace(config, greedy_text=tuple(wrong)))
    assert generated(misled) == truth and len(misled) == len(plain)
    past = [k for k, r in enumerate(plain) if r.cumulative_tokens - len(r.committed_tokens) > 6]
    assert past and any(r.oracle_length for r in plain[past[0] :]), "the run must look ahead past the divergence"
    for k in past:
        assert misled[k].oracle_length == plain[k].oracle_length, k


def test_a_known_text_is_refused_where_it_cannot_hold(pair):
    decoder = SpeculativeDecoder(pair, PROFILE)
    with pytest.raises(ValueError, match="temperature 0"):
        DecodeConfig(temperature=0.7, greedy_text=(1, 2, 3))
    text = tuple(generated(decode(decoder, [5, 17, 42], "ar", DecodeConfig(max_new_tokens=12))))
    with pytest.raises(ValueError, match="whole greedy output"):
        decode(decoder, [5, 17, 42], "oracle", DecodeConfig(max_new_tokens=16, greedy_text=text))
    with pytest.raises(ValueError, match="whole greedy output"):
        decode(decoder, [5, 17, 42], "oracle", DecodeConfig(max_new_tokens=8, greedy_text=text))
