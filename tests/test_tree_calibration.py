"""Path probabilities of draft-tree nodes against the accepted path: samples from records, reliability
per depth, the power correction's fit."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from decoding import run, with_drafter
from fake_drafters import GreedyOracleDrafter

from libraspec.analysis.tree_calibration import by_depth, corrected, fit_power, log_loss, node_samples
from libraspec.cost import LatencyProfile
from libraspec.engine import SpeculativeDecoder
from libraspec.models.registry import tiny_pair
from libraspec.modes import make_policy
from libraspec.records import records_to_frame

LAYER = "unit"  # tests/conftest.py

torch.set_num_threads(1)
PROFILE = LatencyProfile.from_linear(t0=0.05, c=0.004, draft_per_block=0.01, n=7, max_tokens=40)


@pytest.fixture(scope="module")
def records():
    pair = tiny_pair("llama", seed=3, dtype=torch.float64)
    drafter = GreedyOracleDrafter(pair.target, block_size=8, confidence=0.9, runner_up=(0, 3))
    decoder = SpeculativeDecoder(with_drafter(pair, drafter), PROFILE)
    policy = make_policy("ddtree", decoder.n, tree_depth=7, node_budget=12)
    return run(decoder, [5, 9, 14, 3], "ddtree", policy, max_new_tokens=24)


def test_every_verified_node_is_one_sample_with_its_path_probability(records):
    samples = node_samples(records)
    assert len(samples) == sum(r.tree_size for r in records)
    assert samples["on_path"].sum() == sum(len(r.tree_path) for r in records)
    for r in records:
        mine = samples[samples["round_index"] == r.round_index].set_index("node")
        for j, parent in enumerate(r.tree_parents):
            want = r.tree_probs[j] * (mine.loc[parent, "path_prob"] if parent >= 0 else 1.0)
            assert mine.loc[j, "path_prob"] == pytest.approx(want)
            assert mine.loc[j, "depth"] == 1 + (mine.loc[parent, "depth"] if parent >= 0 else 0)
    assert node_samples(records_to_frame(records)).equals(samples)  # the exported table gives the same
    assert node_samples(records, modes=("ddtree-priced",)).empty


def test_reliability_per_depth(records):
    samples = node_samples(records)
    table = by_depth(samples, deepest=3)
    assert table["depth"].tolist()[-1] == "all" and table["nodes"].iloc[-1] == len(samples)
    assert table["nodes"].iloc[:-1].sum() == len(samples)
    assert table["depth"].iloc[-2] == "3+"  # deeper nodes pooled
    first = samples[samples["depth"] == 1]
    assert table["on_path"].iloc[0] == pytest.approx(first["on_path"].mean())
    assert table["mean_p"].iloc[0] == pytest.approx(first["path_prob"].mean())
    assert by_depth(samples.iloc[0:0]).empty


def test_the_power_correction_recovers_a_known_miscalibration():
    """Outcomes drawn with probability P^0.5 (P under-confident): the fit finds gamma near 0.5, and
    the corrected probabilities have a smaller log loss and ECE than P."""
    gen = np.random.default_rng(0)
    p = gen.uniform(0.01, 1.0, 20_000)
    y = (gen.uniform(size=p.size) < p**0.5).astype(int)
    samples = pd.DataFrame({"depth": 1, "path_prob": p, "on_path": y})
    gamma = fit_power(samples)
    assert 0.45 < gamma < 0.55
    assert log_loss(corrected(p, gamma), y) < log_loss(p, y)
    before, after = by_depth(samples)["ece"].iloc[-1], by_depth(samples, gamma)["ece"].iloc[-1]
    assert after < before / 3
    assert fit_power(samples.iloc[0:0]) == 1.0
    with pytest.raises(ValueError, match="gamma"):
        corrected(p, 0.0)
