"""Speculative sampling preserves the target distribution (a statistical test that can fail).

Setup: a tiny-vocabulary target (V = 6) and a random drafter whose distribution differs
from the target's. For a fixed prompt we compute the exact target probability of every
pair of first two generated tokens (36 cells) from the model itself, then draw N = 2400
two-token continuations with speculative sampling (LibraSpec policy, temperature 1, one
seed per draw) and run Pearson's chi-square goodness-of-fit test against the exact
probabilities. Threshold: the 0.999 quantile of chi-square with (cells - 1) degrees of
freedom (Wilson-Hilferty approximation), so a correct sampler fails with probability
about 0.001 (and never, with these fixed seeds, once it has passed). A deliberately broken
verifier that accepts every draft produces the drafter's distribution instead and must
exceed the threshold by far: that shows the test can fail.
"""
from __future__ import annotations

import math

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

import libraspec.engine as engine
from libraspec.cost import LatencyProfile
from libraspec.engine import DecodeConfig, SpeculativeDecoder
from libraspec.models.dflash import DFlashConfig, DFlashDrafter
from libraspec.models.registry import ModelPair, ByteTokenizer
from libraspec.models.target import TargetModel
from libraspec.policy import LibraSpecPolicy

torch.set_num_threads(1)
V, N, PROMPT = 6, 2400, [1, 4, 3]


def chi2_quantile(df: int, z: float = 3.0902) -> float:
    """Wilson-Hilferty approximation of the chi-square quantile at standard-normal z (0.999)."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


@pytest.fixture(scope="module")
def pair():
    torch.manual_seed(7)
    cfg = LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      bos_token_id=1, eos_token_id=None, pad_token_id=0, tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg).double().eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)  # spread the target's distribution away from uniform
    dcfg = DFlashConfig.from_target_config(cfg, block_size=4, num_hidden_layers=1, mask_token_id=0)
    drafter = DFlashDrafter(dcfg, model.get_input_embeddings(), model.get_output_embeddings()).double().eval()
    return ModelPair("tiny-v6", "tiny-vocabulary pair", TargetModel(model), drafter, ByteTokenizer())


def exact_two_token_probs(pair) -> torch.Tensor:
    model = pair.target.model
    with torch.no_grad():
        p1 = torch.softmax(model(input_ids=torch.tensor([PROMPT])).logits[0, -1].double(), -1)  # (V,)
        seqs = torch.tensor([PROMPT + [x] for x in range(V)])
        p2 = torch.softmax(model(input_ids=seqs).logits[:, -1].double(), -1)  # (V, V)
    return p1[:, None] * p2  # (V, V): P(x1, x2)


def chi2(pair) -> float:
    profile = LatencyProfile.from_linear(0.05, 0.004, 0.01, pair.n, 16)
    decoder = SpeculativeDecoder(pair, profile)
    counts = torch.zeros(V, V)
    for seed in range(N):
        cfg = DecodeConfig(max_new_tokens=2, temperature=1.0, seed=seed)
        out = [t for r in decoder.run(PROMPT, "libraspec", LibraSpecPolicy(2.2, 6), cfg) for t in r.committed_tokens]
        counts[out[0], out[1]] += 1
    expected = exact_two_token_probs(pair).flatten() * N
    observed = counts.flatten()
    keep = expected >= 5  # pool cells with small expected counts into one
    obs = torch.cat([observed[keep], observed[~keep].sum().view(1)])
    exp = torch.cat([expected[keep], expected[~keep].sum().view(1)])
    obs, exp = obs[exp > 0], exp[exp > 0]
    return float(((obs - exp) ** 2 / exp).sum()), chi2_quantile(len(exp) - 1)


def test_speculative_sampling_matches_target_distribution(pair):
    statistic, threshold = chi2(pair)
    print(f"chi-square {statistic:.1f}, threshold {threshold:.1f}")
    assert statistic < threshold, f"chi-square {statistic:.1f} >= {threshold:.1f}"


def test_broken_verifier_is_detected(pair, monkeypatch):
    def accept_everything(drafts, draft_probs, target_logits, cfg, uniforms, generator):
        p = torch.softmax(target_logits[-1].double() / cfg.temperature, -1)
        return drafts.shape[0], int(torch.multinomial(p.float(), 1, generator=generator))

    monkeypatch.setattr(engine, "sample_accept", accept_everything)
    statistic, threshold = chi2(pair)
    print(f"broken verifier: chi-square {statistic:.1f}, threshold {threshold:.1f}")
    assert statistic > 3 * threshold, f"broken verifier not detected: chi-square {statistic:.1f}"
