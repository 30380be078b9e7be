"""Benchmark grids from replay (tiny pair): pooled speedups are ratios of the replays' sums, the best
schedule bounds every chain configuration, identical decisions are one tie, lock-step rows add up."""

from __future__ import annotations

import pytest
import torch
from decoding import generated, run, with_drafter
from fake_drafters import PartlyRightModule

from libraspec.analysis.regimes import synthetic_profile
from libraspec.analysis.replay import replay
from libraspec.analysis.trace import record_trace
from libraspec.engine import SpeculativeDecoder
from libraspec.experiments import grids
from libraspec.models.registry import tiny_pair
from libraspec.spec import RunSpec

LAYER = "unit"  # tests/conftest.py

torch.set_num_threads(1)
PROFILE = synthetic_profile(0.05, 0.004, 0.01, 7, max_tokens=70)


@pytest.fixture(scope="module")
def traces():
    base = tiny_pair("llama", seed=3, dtype=torch.float64)
    pair = with_drafter(base, PartlyRightModule(base, 3))
    decoder = SpeculativeDecoder(pair, PROFILE, drafter="dflash")
    gen = torch.Generator().manual_seed(2)
    out = []
    for size in (6, 11):
        prompt = torch.randint(3, pair.target.vocab_size, (size,), generator=gen).tolist()
        output = generated(run(decoder, prompt, "ar", None, max_new_tokens=16))
        out.append(record_trace(pair, "dflash", prompt, output, 16, lookahead=63, top_k=16))
    return out


def test_grids_pool_replays_and_the_best_schedule_bounds_them(traces):
    configs = grids.chain_grid(7) + grids.tree_grid()
    labels = [c.label for c in configs]
    assert labels[0] == "AR" and "static d=14" in labels and "static d=24" in labels and grids.BEST in labels
    assert {"LibraSpec alpha=auto", "FailFast (paper)", "ddtree-libraspec nodes=64"} <= set(labels)
    summaries = {}
    for config in configs:
        if config.mode.startswith("ddtree") and config.settings.node_budget > 16:
            with pytest.raises(ValueError, match="candidates"):  # traced 16 wide
                grids.replay_rows(traces, config, PROFILE)
            continue
        rows = grids.replay_rows(traces, config, PROFILE)
        summaries[config.label] = grids.summarize(rows, ["a", "b"])
    static = summaries["static d=3"]
    want = [replay(t, "static", PROFILE, RunSpec(static_length=3)) for t in traces]
    ar = sum(len(t.output) for t in traces) * PROFILE.ar_token_time()
    assert static["speedup"] == pytest.approx(ar / sum(r[-1].cumulative_modeled_s for r in want), rel=1e-12)
    assert static["tau"] == pytest.approx(sum(len(t.output) for t in traces) / sum(len(r) for r in want))
    assert summaries["AR"]["speedup"] == pytest.approx(1.0)
    best = summaries[grids.BEST]["speedup"]
    chains = [s["speedup"] for label, s in summaries.items() if not label.startswith("ddtree")]
    assert best >= max(chains) * (1 - 1e-12)
    low, high = static["interval"]
    assert low <= static["speedup"] <= high
    ties = grids.ties(summaries)
    assert summaries["static d=3"]["digest"] != summaries["static d=1"]["digest"] and "static d=3" not in ties
    for label, first in ties.items():  # a tie is the same decisions, so the same modeled time
        assert summaries[label]["speedup"] == pytest.approx(summaries[first]["speedup"], rel=1e-12)
    assert ties, "some settings of this grid make identical decisions (d_max that never binds)"


def test_lockstep_rows_price_groups(traces):
    one = PROFILE
    profiles = {1: one, 2: synthetic_profile(0.05, 0.02, 0.01, 7, max_tokens=70)}
    config = grids.Config("static d=3", "static", RunSpec(static_length=3))
    rows = grids.lockstep_rows([traces, traces[1:]], config, profiles)
    assert [r["tokens"] for r in rows] == [len(traces[0].output) + len(traces[1].output), len(traces[1].output)]
    alone = replay(traces[1], "static", one, RunSpec(static_length=3))
    assert rows[1]["modeled_s"] == pytest.approx(alone[-1].cumulative_modeled_s, rel=1e-12)
    assert grids.summarize(rows)["digest"] is None  # lock-step rows record no decisions to compare
    # each request makes its own rounds in lock-step: tau and mean d count them, not lock-step rounds
    each = [replay(t, "static", one, RunSpec(static_length=3)) for t in traces[:2]]
    assert rows[0]["rounds"] == sum(map(len, each)) and rows[1]["rounds"] == len(alone)
    assert rows[0]["sum_d"] == sum(r.chosen_length for run in each for r in run)
    summary = grids.summarize(rows[:1])
    assert summary["tau"] == pytest.approx(rows[0]["tokens"] / sum(map(len, each)))
