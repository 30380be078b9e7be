"""Draft traces and their replay: round for round what the engine does, for every mode and drafter
(greedy, tiny pairs in float64); the best schedule in hindsight; a trace's file round trip."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from decoding import generated, run, with_drafter
from fake_drafters import GreedyOracleDrafter, PartlyRightModule, trained_eagle

from libraspec.analysis.replay import ReplayDecoder, best_schedule, replay, rounds_reproduced
from libraspec.analysis.trace import DraftTrace, TraceTooShort, record_trace
from libraspec.cost import LatencyProfile
from libraspec.drafters import DRAFTERS
from libraspec.engine import DecodeConfig, SpeculativeDecoder
from libraspec.models.registry import tiny_pair
from libraspec.modes import MODES
from libraspec.spec import RunSpec

LAYER = "unit"  # tests/conftest.py

torch.set_num_threads(1)
PROFILE = LatencyProfile.from_linear(t0=0.05, c=0.004, draft_per_block=0.01, n=7, max_tokens=40)
UNTIMED = ("draft_s", "policy_s", "verify_s", "cumulative_s")
SETTINGS = RunSpec(alpha=2.2, d_max=14, static_length=5, node_budget=6, tree_depth=10)
MAX_NEW = 24


@pytest.fixture(scope="module")
def base():
    return tiny_pair("llama", seed=3, dtype=torch.float64)


@pytest.fixture(scope="module")
def taught(base):
    """The EAGLE-style head of the "partly" double, trained once per module on text that includes
    the target's continuations of the test prompts."""
    return trained_eagle(base, prompts=prompts(base, 3))


def doubles(base, taught=None):
    """Block-diffusion modules whose drafts are partly right (the real K/V context; a tree's
    runner-up candidates) and, for "partly", an EAGLE-style head trained on the tiny target's text,
    so rounds accept some, all or none of their drafts."""
    return {
        "random": base,
        "partly": dataclasses.replace(with_drafter(base, PartlyRightModule(base, 3)), eagle=taught),
        "runner-up": with_drafter(
            base, GreedyOracleDrafter(base.target, block_size=8, confidence=0.9, runner_up=(0, 3))
        ),
    }


def prompts(pair, count: int):
    gen = torch.Generator().manual_seed(5)
    return [torch.randint(3, pair.target.vocab_size, (5 + 4 * i,), generator=gen).tolist() for i in range(count)]


def same_rounds(replayed, engine, where) -> None:
    assert len(replayed) == len(engine), where
    for ours, theirs in zip(replayed, engine):
        assert math.isnan(ours.verify_s) and math.isnan(ours.cumulative_s)  # nothing was timed
        assert all(math.isnan(getattr(ours, key)) for key in UNTIMED)
        mine, want = dataclasses.asdict(ours), dataclasses.asdict(theirs)
        for key in UNTIMED:
            mine.pop(key), want.pop(key)
        for key in ("modeled_s", "cumulative_modeled_s"):
            assert mine.pop(key) == pytest.approx(want.pop(key), rel=1e-12), (where, ours.round_index)
        for key in ("confidences", "tree_probs", "tree_confidences"):
            np.testing.assert_allclose(mine.pop(key), want.pop(key), rtol=1e-9, atol=1e-12, err_msg=str(where))
        assert mine == want, (where, ours.round_index)
    assert rounds_reproduced(engine, replayed) == len(engine), where
    off = [dataclasses.replace(replayed[0], accepted=replayed[0].accepted + 1), *replayed[1:]]
    assert rounds_reproduced(engine, off) == len(engine) - 1, where  # one round off: counted out


# the iterative drafter with the real module only: the doubles ignore which positions are masked;
# the head with its "partly" double only: a head trained on the tiny target's text, whose rounds reject
# and accept several drafts (asserted below), which covers a random head's rounds that reject at once
CELLS = [(d, double) for d in DRAFTERS for double in ("random", "partly", "runner-up")]
SKIP = {("fastdllm", "partly"), ("fastdllm", "runner-up"), ("eagle", "random"), ("eagle", "runner-up")}


@pytest.mark.parametrize("drafter,double", [c for c in CELLS if c not in SKIP])
def test_replay_equals_the_engine_round_for_round(base, taught, drafter, double):
    """Every mode of the registry (trees and the oracle included), annotated with d*: every field
    of every round but the measured times, from a trace recorded once per prompt (2 prompts, of 5
    and 9 tokens)."""
    pair = doubles(base, taught)[double]
    decoder = SpeculativeDecoder(pair, PROFILE, drafter=drafter)
    settings, _ = SETTINGS.checked(pair.n)
    accepted, lengths = set(), set()
    for prompt in prompts(pair, 2):
        output = generated(run(decoder, prompt, "ar", None, max_new_tokens=MAX_NEW))
        trace = record_trace(pair, drafter, prompt, output, MAX_NEW, lookahead=14, top_k=6)
        for mode in (m for m in MODES if m != "ar"):
            config = DecodeConfig(max_new_tokens=MAX_NEW, lookahead=14, annotate_oracle=mode != "oracle")
            engine = list(decoder.run(prompt, mode, MODES[mode].policy(settings, PROFILE), config))
            replayed = replay(trace, mode, PROFILE, SETTINGS, lookahead=14)
            same_rounds(replayed, engine, (drafter, double, mode))
            accepted |= {r.accepted for r in engine}
            lengths |= {r.chosen_length for r in engine}
    assert len(lengths) > 2  # rounds of several lengths were compared
    if double != "random":
        assert max(accepted) >= 2  # and rounds that accepted several drafts


def test_best_schedule_is_the_hindsight_limit(base):
    """The schedule's modeled time is what replaying its own lengths costs, and no policy of the
    registry, at any setting tried, nor the per-round oracle, beats it."""
    pair = doubles(base)["partly"]
    decoder = SpeculativeDecoder(pair, PROFILE, drafter="dflash")
    for prompt in prompts(pair, 3):
        output = generated(run(decoder, prompt, "ar", None, max_new_tokens=MAX_NEW))
        trace = record_trace(pair, "dflash", prompt, output, MAX_NEW, lookahead=21)
        schedule = best_schedule(trace, PROFILE)
        # replaying the schedule's lengths (a scripted policy) costs exactly its time
        scripted = ScriptedPolicy(schedule.lengths)
        rounds = list(ReplayDecoder.from_trace(trace, PROFILE).run(trace.prompt, "static", scripted, _config()))
        assert [r.start_position - len(prompt) for r in rounds] == list(schedule.starts)
        assert rounds[-1].cumulative_modeled_s == pytest.approx(schedule.seconds, rel=1e-12)
        assert generated(rounds) == output
        others = [replay(trace, "oracle", PROFILE, lookahead=21)]
        for alpha in (0.5, 2.2, 8.0):
            for d_max in (7, 14, 21):
                others.append(replay(trace, "libraspec", PROFILE, RunSpec(alpha=alpha, d_max=d_max)))
        for d in (1, 3, 7, 14):
            others.append(replay(trace, "static", PROFILE, RunSpec(static_length=d)))
        times = [r[-1].cumulative_modeled_s for r in others]
        assert min(times) >= schedule.seconds * (1 - 1e-12)
        assert schedule.speedup == pytest.approx(len(output) * PROFILE.ar_token_time() / schedule.seconds)


class ScriptedPolicy:
    """A policy that verifies a given list of lengths, one per round."""

    name = "static"
    d_max = 64

    def __init__(self, lengths):
        self.lengths = list(lengths)
        self.k = 0

    def choose_length(self, buffer):
        from libraspec.policy import Decision

        d = self.lengths[self.k]
        self.k += 1
        buffer.ensure(d)
        return Decision(d)

    def update(self, record) -> None:
        pass

    def reset(self) -> None:
        self.k = 0


def _config():
    return DecodeConfig(max_new_tokens=MAX_NEW, lookahead=21)


def test_a_trace_round_trips_through_its_file_and_refuses_what_it_lacks(base, tmp_path):
    pair = doubles(base)["runner-up"]
    decoder = SpeculativeDecoder(pair, PROFILE, drafter="hybrid")
    prompt = prompts(pair, 1)[0]
    output = generated(run(decoder, prompt, "ar", None, max_new_tokens=MAX_NEW))
    trace = record_trace(pair, "hybrid", prompt, output, MAX_NEW, lookahead=7, top_k=2, meta={"commit": "abc"})
    loaded = DraftTrace.load(trace.save(tmp_path / "t.npz"))
    assert loaded.meta["commit"] == "abc" and loaded.meta["seconds"] > 0
    for key in ("tokens", "q", "steps", "empty", "cand_tokens", "cand_probs"):
        np.testing.assert_array_equal(getattr(loaded, key), getattr(trace, key))
    assert (loaded.prompt, loaded.output, loaded.step_sources, loaded.discarded) == (
        trace.prompt,
        trace.output,
        trace.step_sources,
        trace.discarded,
    )
    want = replay(trace, "libraspec", PROFILE, RunSpec(d_max=7))
    same_rounds(replay(loaded, "libraspec", PROFILE, RunSpec(d_max=7)), want, "loaded")
    with pytest.raises(TraceTooShort, match="larger lookahead"):
        replay(trace, "libraspec", PROFILE, RunSpec(d_max=14, alpha=64))
    replay(trace, "ddtree", PROFILE, RunSpec(node_budget=4))  # the hybrid offers one candidate a position
    block = record_trace(pair, "dflash", prompt, output, MAX_NEW, lookahead=7, top_k=2)
    with pytest.raises(TraceTooShort, match="candidates"):
        replay(block, "ddtree", PROFILE, RunSpec(node_budget=4))
    with pytest.raises(ValueError, match="greedy"):
        ReplayDecoder.from_trace(trace, PROFILE).run(
            trace.prompt, "static", MODES["static"].policy(SETTINGS.checked(7)[0]), DecodeConfig(temperature=1.0)
        )
    with pytest.raises(ValueError, match="prompt"):
        list(ReplayDecoder.from_trace(trace, PROFILE).run([1, 2], "ar", None, DecodeConfig(max_new_tokens=4)))
    (tmp_path / "bad.npz").write_bytes(b"not a trace")
    with pytest.raises(ValueError, match="not a readable draft trace"):
        DraftTrace.load(tmp_path / "bad.npz")


def test_a_priced_tree_in_lock_step_prices_its_nodes_at_its_batch_size(base):
    """ddtree-priced among B requests reads the batch-B profile: where a verified token costs 5x more
    it verifies fewer nodes per round than where batch B costs what batch 1 does."""
    from libraspec.analysis.regimes import lockstep, synthetic_profile

    pair = doubles(base)["runner-up"]  # path probabilities 0.9^k, runner-ups 0.3 * 0.9^k: some pay, some not
    decoder = SpeculativeDecoder(pair, PROFILE, drafter="dflash")
    traces = []
    for prompt in prompts(pair, 3):
        output = generated(run(decoder, prompt, "ar", None, max_new_tokens=MAX_NEW))
        traces.append(record_trace(pair, "dflash", prompt, output, MAX_NEW, lookahead=14, top_k=8))
    settings = RunSpec(d_max=14, node_budget=8)
    many = synthetic_profile(0.05, 0.02, 0.01, 7, max_tokens=40)
    steep = lockstep(traces, "ddtree-priced", {1: PROFILE, 3: many}, settings)
    flat = lockstep(traces, "ddtree-priced", {1: PROFILE, 3: PROFILE}, settings)
    assert steep.tokens == flat.tokens == sum(len(t.output) for t in traces)
    assert flat.verified_rows > flat.request_rounds  # nodes were verified when cheap
    # fewer rows per round (more rounds, each verifying less)
    assert steep.verified_rows / steep.request_rounds < flat.verified_rows / flat.request_rounds, (steep, flat)


@pytest.mark.parametrize("drafter", ["dflash", "hybrid"])
def test_a_text_that_ends_at_an_eos_replays_equal(base, drafter):
    """A stop token early in the text, drafts that run on past it (a drafter that knows the target's
    greedy text): the engine counts only the drafts up to the stop as accepted, and the replay of
    every mode makes the same rounds to the end."""
    probe = doubles(base)["runner-up"]
    prompt = prompts(probe, 1)[0]
    output = generated(run(SpeculativeDecoder(probe, PROFILE), prompt, "ar", None, max_new_tokens=MAX_NEW))
    stop = output[9]
    pair = dataclasses.replace(probe, stop_ids=frozenset({stop}))
    decoder = SpeculativeDecoder(pair, PROFILE, drafter=drafter)
    output = generated(run(decoder, prompt, "ar", None, max_new_tokens=MAX_NEW))
    assert output[-1] == stop and len(output) < MAX_NEW
    trace = record_trace(pair, drafter, prompt, output, MAX_NEW, lookahead=14, top_k=6)
    settings, _ = SETTINGS.checked(pair.n)
    past = 0
    for mode in (m for m in MODES if m != "ar"):
        config = DecodeConfig(max_new_tokens=MAX_NEW, lookahead=14, annotate_oracle=mode != "oracle")
        engine = list(decoder.run(prompt, mode, MODES[mode].policy(settings, PROFILE), config))
        assert generated(engine) == output, mode
        last = engine[-1]
        assert last.accepted <= len(last.committed_tokens) and len(last.tree_path or ()) <= len(last.committed_tokens)
        past += last.chosen_length > len(last.committed_tokens)  # it verified drafts past the stop
        same_rounds(replay(trace, mode, PROFILE, SETTINGS, lookahead=14), engine, (drafter, mode))
    assert past  # some last round drafted past the stop


def test_lockstep_prices_each_round_as_one_batched_forward(base):
    """One request in lock-step costs what its own replay costs; several cost, per lock-step round,
    the slowest drafting, one forward over the unfinished requests at the longest k and the upkeep."""
    from libraspec.analysis.regimes import describe, lockstep, synthetic_profile

    pair = doubles(base)["partly"]
    decoder = SpeculativeDecoder(pair, PROFILE, drafter="dflash")
    traces = []
    for prompt in prompts(pair, 3):
        budget = MAX_NEW - 4 * len(traces)  # requests of different lengths: some finish first
        output = generated(run(decoder, prompt, "ar", None, max_new_tokens=budget))
        traces.append(record_trace(pair, "dflash", prompt, output, budget, lookahead=14))
    one = PROFILE
    many = synthetic_profile(0.05, 0.02, 0.01, 7, max_tokens=40)  # a verified token costs 5x more at batch 3
    profiles = {1: one, 3: many}
    settings = RunSpec(d_max=14)
    alone = replay(traces[0], "libraspec", one, settings)
    single = lockstep(traces[:1], "libraspec", profiles, settings)
    assert single.seconds == pytest.approx(alone[-1].cumulative_modeled_s, rel=1e-12)
    assert single.ar_seconds == pytest.approx(len(traces[0].output) * one.ar_token_time())
    runs = [replay(t, "libraspec", one, settings) for t in traces]
    want, k = 0.0, 0
    while any(k < len(r) for r in runs):
        live = [r[k] for r in runs if k < len(r)]
        rows = max((r.tree_size or r.chosen_length) + 1 for r in live)
        drafting = max(r.modeled_s - one.verify_time(r.chosen_length + 1) - one.fit_s for r in live)
        forward = one.verify_time(rows) if len(live) == 1 else many.verify_time(rows) if len(live) == 3 else None
        if forward is None:  # two requests left: halfway between the measured batch sizes
            forward = (one.verify_time(rows) + many.verify_time(rows)) / 2
        want += drafting + forward + one.fit_s
        k += 1
    together = lockstep(traces, "libraspec", profiles, settings)
    assert together.seconds == pytest.approx(want, rel=1e-12)
    assert together.rounds == max(len(r) for r in runs)
    assert together.tokens == sum(len(t.output) for t in traces)
    assert "synthetic" in describe(many) and "modeled" in describe(one)
    assert "measured" in describe(dataclasses.replace(one, meta={"device": "cpu", "batch": 8}))
