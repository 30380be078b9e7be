"""Greedy replay without the target: round for round what the engine does, for drafters that read
token ids only; refused for drafters that read the target's features."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from test_lookup import (
    PROFILE,
    generated,
    pair,  # noqa: F401  (fixture)
    repetitive_prompts,
)

from libraspec.analysis.replay import replay_greedy
from libraspec.drafters import make_drafter
from libraspec.engine import DecodeConfig, SpeculativeDecoder, end_ids
from libraspec.modes import POLICY_MODES, make_policy

LAYER = "unit"  # tests/conftest.py

torch.set_num_threads(1)
UNTIMED = ("draft_s", "policy_s", "verify_s", "cumulative_s")


@pytest.mark.parametrize("lookahead", [None, 30], ids=["plain", "annotated"])
@pytest.mark.parametrize("mode", POLICY_MODES)
def test_replay_makes_the_engines_rounds(pair, mode, lookahead):  # noqa: F811
    """Every field of every round but the measured times: drafts, q_i, d, Algorithm 1's steps,
    eps_i, accepted prefix, committed tokens, modeled seconds and (annotated) the oracle's d*,
    for every policy mode."""
    decoder = SpeculativeDecoder(pair, PROFILE, drafter="lookup")
    lengths, stars = set(), set()
    config = DecodeConfig(max_new_tokens=40, lookahead=lookahead or 24, annotate_oracle=bool(lookahead))
    for prompt in repetitive_prompts():
        output = generated(decoder.run(prompt, "ar", None, DecodeConfig(max_new_tokens=40)))
        settings = dict(d_max=30, static_length=5, alpha=2.2)
        # a priced mode prices its choices with the decoder's profile (the others ignore it)
        engine_rounds = list(decoder.run(prompt, mode, make_policy(mode, pair.n, PROFILE, **settings), config))
        replayed = replay_greedy(
            make_drafter("lookup", pair),
            make_policy(mode, pair.n, PROFILE, **settings),
            prompt,
            output,
            40,
            PROFILE,
            lookahead=lookahead,
            eos_ids=end_ids(pair),
        )
        assert len(replayed) == len(engine_rounds)
        for ours, theirs in zip(replayed, engine_rounds):
            assert math.isnan(ours.verify_s)  # nothing was timed
            stars.add(ours.oracle_length)
            mine, want = dataclasses.asdict(ours), dataclasses.asdict(theirs)
            for key in UNTIMED:
                mine.pop(key), want.pop(key)
            for key in ("modeled_s", "cumulative_modeled_s"):
                assert mine.pop(key) == pytest.approx(want.pop(key)), (mode, prompt, ours.round_index)
            assert mine == want, (mode, prompt, ours.round_index)
            lengths.add(ours.chosen_length)
    assert 0 in lengths and len(lengths) > 2  # AR steps and drafted rounds of several lengths
    if lookahead is None:
        assert stars == {None}
    else:  # the annotation judged rounds where no draft pays and rounds where several do
        assert 0 in stars and max(s for s in stars if s is not None) >= 3, stars


def test_replay_refuses_a_drafter_that_reads_target_features(pair):  # noqa: F811
    with pytest.raises(ValueError, match="only the engine"):
        replay_greedy(make_drafter("dflash", pair), make_policy("static", pair.n), [1, 2, 3], [4], 8, PROFILE)
    with pytest.raises(ValueError, match="max_new_tokens"):
        replay_greedy(make_drafter("lookup", pair), make_policy("static", pair.n), [1, 2, 3], [4, 5], 1, PROFILE)
