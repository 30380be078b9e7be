"""The one experiment driver (`libraspec.experiments.driver.decode_grid`): the order of runs, progress
counts, cancellation between runs, a fresh policy per run, per-round stepping, closing a
run left unfinished, and records equal to the engine's own on a tiny pair."""

from __future__ import annotations

import threading

import pytest
import torch

from libraspec.cost import LatencyProfile
from libraspec.engine import DecodeConfig, SpeculativeDecoder
from libraspec.experiments.driver import Cancelled, Job, RoundDone, RunDone, decode_grid, grid_order, mode_job
from libraspec.models.registry import tiny_pair
from libraspec.policy import G4Policy
from libraspec.spec import RunSpec

LAYER = "unit"  # tests/conftest.py

torch.set_num_threads(1)
PROFILE = LatencyProfile.from_linear(t0=0.05, c=0.004, draft_per_block=0.01, n=7, max_tokens=40)
PROMPTS = [[1, 40, 50], [1, 60, 70, 80], [1, 90]]
CONFIG = DecodeConfig(max_new_tokens=4)


class FakeDecoder:
    """Stands in for SpeculativeDecoder.run: logs every call and yields `rounds` records per run
    (the prompt index, the round and the seed, so a test can tell runs apart)."""

    def __init__(self, rounds: int = 2):
        self.rounds = rounds
        self.calls: list[tuple] = []
        self.runs: list = []  # the generators it handed out
        self.closed = 0

    def run(self, prompt_ids, mode, policy, config):
        self.calls.append((PROMPTS.index(list(prompt_ids)), mode, policy, config))
        generator = self._rounds(PROMPTS.index(list(prompt_ids)), config)
        self.runs.append(generator)
        return generator

    def _rounds(self, index, config):
        try:
            for k in range(self.rounds):
                yield (index, k, config.seed)
        finally:
            self.closed += 1


def two_jobs():
    seeded = Job("ar", "ar", None, lambda i: DecodeConfig(max_new_tokens=4, seed=10 + i))
    return [seeded, mode_job("static", "static", RunSpec(static_length=3), CONFIG)]


def runs_of(events):
    return [(e.index, e.label) for e in events if isinstance(e, RunDone)]


def test_prompt_major_and_job_major_orders():
    events = list(decode_grid(FakeDecoder(), PROMPTS, two_jobs()))
    assert runs_of(events) == [(0, "ar"), (0, "static"), (1, "ar"), (1, "static"), (2, "ar"), (2, "static")]
    events = list(decode_grid(FakeDecoder(), PROMPTS, two_jobs(), outer="jobs"))
    assert runs_of(events) == [(0, "ar"), (1, "ar"), (2, "ar"), (0, "static"), (1, "static"), (2, "static")]
    assert grid_order(2, ["a", "b"], "jobs") == [(0, "a"), (1, "a"), (0, "b"), (1, "b")]


def test_progress_counts_and_records_per_run():
    decoder = FakeDecoder(rounds=3)
    events = list(decode_grid(decoder, PROMPTS, two_jobs()))
    assert [(e.done, e.total) for e in events] == [(k, 6) for k in range(1, 7)]
    ar = [e for e in events if e.label == "ar"]
    assert [e.records for e in ar] == [[(i, k, 10 + i) for k in range(3)] for i in range(3)]  # config(i)
    assert all(e.mode == "static" and e.records[0][2] == 0 for e in events if e.label == "static")


def test_cancel_stops_between_runs():
    cancel, decoder = threading.Event(), FakeDecoder()
    seen = []
    for event in decode_grid(decoder, PROMPTS, two_jobs(), cancel=cancel):
        seen.append(event)
        if isinstance(event, RunDone) and event.done == 2:
            cancel.set()
    assert runs_of(seen) == [(0, "ar"), (0, "static")] and seen[-1] == Cancelled(2, 6)
    assert len(decoder.calls) == 2  # no run started after the cancel
    assert list(decode_grid(decoder, PROMPTS, two_jobs(), cancel=cancel)) == [Cancelled(0, 6)]
    assert len(decoder.calls) == 2


def test_every_run_gets_a_fresh_policy():
    made = []

    def factory():
        made.append(G4Policy(2, 6))
        return made[-1]

    decoder = FakeDecoder()
    list(decode_grid(decoder, PROMPTS, [Job("g4", "g4", factory, CONFIG)]))
    assert len(made) == 3 and [call[2] for call in decoder.calls] == made
    assert len({id(policy) for policy in made}) == 3


def test_mode_job_takes_its_policy_from_the_registry():
    job = mode_job("g4", "g4", RunSpec(static_length=5, d_max=9).checked(7).spec, CONFIG)  # n = 7
    first, second = job.new_policy(), job.new_policy()
    assert isinstance(first, G4Policy) and (first.initial, first.d_max) == (5, 9) and first is not second
    assert mode_job("ar", "ar", RunSpec(), CONFIG).new_policy() is None


def test_alpha_policy_sets_alpha_in_every_mode_that_reads_it_and_auto_only_where_libraspec_runs():
    from libraspec.analysis.autoalpha import AutoAlphaLibraSpecPolicy
    from libraspec.experiments.driver import AUTO, alpha_policy
    from libraspec.policy import LibraSpecPolicy, StaticPolicy
    from libraspec.tree_policy import MarginalTreePolicy, TreePolicy

    settings = RunSpec(d_max=12, node_budget=9, static_length=3)
    chain = alpha_policy("libraspec", settings, 4.5)
    assert type(chain) is LibraSpecPolicy and (chain.alpha, chain.d_max) == (4.5, 12)
    assert alpha_policy("ddtree-marginal", settings, 4.5).alpha == 4.5
    auto = alpha_policy("libraspec", settings, AUTO, PROFILE)
    assert isinstance(auto, AutoAlphaLibraSpecPolicy) and auto.d_max == 12
    tree = alpha_policy("ddtree-libraspec", settings, AUTO, PROFILE)
    assert isinstance(tree, TreePolicy) and isinstance(tree.depth_policy, AutoAlphaLibraSpecPolicy)
    assert tree.node_budget == 9
    assert isinstance(alpha_policy("static", settings, AUTO, PROFILE), StaticPolicy)  # reads no alpha
    assert alpha_policy("oracle", settings, AUTO, PROFILE) is None
    assert isinstance(alpha_policy("ddtree-marginal", settings, 2.0), MarginalTreePolicy)
    with pytest.raises(ValueError, match="ddtree-marginal"):
        alpha_policy("ddtree-marginal", settings, AUTO, PROFILE)
    with pytest.raises(ValueError, match="unknown mode 'eagle'; choose one of ar, "):
        alpha_policy("eagle", settings, 2.0)


def test_rounds_step_one_round_at_a_time():
    events = list(decode_grid(FakeDecoder(rounds=2), PROMPTS[:2], two_jobs()[:1], rounds=True))
    kinds = [type(e).__name__ for e in events]
    assert kinds == ["RoundDone", "RoundDone", "RunDone"] * 2
    assert [(e.index, e.record[1], e.done) for e in events if isinstance(e, RoundDone)] == [
        (0, 0, 0),
        (0, 1, 0),
        (1, 0, 1),
        (1, 1, 1),
    ]


def test_closing_mid_run_closes_the_engine_run():
    decoder = FakeDecoder(rounds=5)
    grid = decode_grid(decoder, PROMPTS, two_jobs(), rounds=True)
    assert isinstance(next(grid), RoundDone)
    grid.close()  # what the app does to a run that a newer one supersedes
    assert decoder.closed == 1 and len(decoder.runs) == 1  # held by the fake, yet closed


@pytest.mark.parametrize(
    "jobs, outer, match",
    [
        (lambda: two_jobs() + two_jobs()[:1], "prompts", "distinct"),
        (two_jobs, "rows", "outer"),
    ],
)
def test_bad_grids_are_refused(jobs, outer, match):
    with pytest.raises(ValueError, match=match):
        next(decode_grid(FakeDecoder(), PROMPTS, jobs(), outer=outer))


def test_records_match_the_engine_on_a_tiny_pair():
    decoder = SpeculativeDecoder(tiny_pair("llama", seed=3), PROFILE)  # n = 7

    def sampled(index: int) -> DecodeConfig:
        return DecodeConfig(max_new_tokens=6, temperature=1.0, seed=index)

    jobs = [mode_job("g4", "g4", RunSpec(static_length=3, d_max=9).checked(7).spec, sampled)]
    events = list(decode_grid(decoder, PROMPTS[:2], jobs))
    assert runs_of(events) == [(0, "g4"), (1, "g4")]
    for event in events:
        own = list(decoder.run(PROMPTS[event.index], "g4", G4Policy(3, 9), sampled(event.index)))
        assert [r.committed_tokens for r in event.records] == [r.committed_tokens for r in own]
        assert [r.chosen_length for r in event.records] == [r.chosen_length for r in own]
