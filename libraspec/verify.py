"""Verification: greedy acceptance and lossless speculative sampling.

Names follow Leviathan et al. (2023) and the LibraSpec paper (section 3.1): x_i is draft
token i, q_i(.) the drafter's distribution at position i, p_i(.) the target's. The target
verifies `[last token, x_1..x_d]` in one pass and so yields p_1..p_{d+1}.

Greedy: accept the longest prefix with x_i == argmax p_i, then take argmax p_{a+1} as the
bonus / correction token. Sampling: accept x_i with probability min(1, p_i(x_i) / q_i(x_i));
on the first rejection sample from normalize(max(p_i - q_i, 0)); after d acceptances sample
the bonus from p_{d+1}. The committed tokens are then distributed exactly as the target's,
provided that x_i is a draw from q_i that nothing before verification looked at: whether
position i is verified and the distribution q_i itself must not depend on the value of x_i
(docs/ARCHITECTURE.md, "Lossless verification"). Drafters therefore hand over distributions,
and drafts are drawn (`Randomness.draw`) only after the length d is chosen.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingConfig:
    """Logit processing applied identically to target and drafter distributions."""

    temperature: float = 0.0  # 0 selects greedy decoding
    top_k: int = 0  # 0 disables
    top_p: float = 1.0  # 1 disables

    def __post_init__(self):
        if not (self.temperature >= 0.0) or self.temperature != self.temperature:
            raise ValueError(f"temperature must be a number >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        if not (0.0 < self.top_p <= 1.0):
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def probabilities(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """Softmax of temperature-scaled logits after top-k / top-p filtering. (..., V) -> (..., V)."""
    scores = logits.double() / cfg.temperature
    if cfg.top_k and cfg.top_k < scores.shape[-1]:
        kth = torch.topk(scores, cfg.top_k, dim=-1).values[..., -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if cfg.top_p < 1.0:
        sorted_scores, order = torch.sort(scores, dim=-1, descending=True)
        cum = torch.softmax(sorted_scores, dim=-1).cumsum(dim=-1)
        drop_sorted = cum - torch.softmax(sorted_scores, dim=-1) >= cfg.top_p  # keep the smallest prefix reaching top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        scores = scores.masked_fill(drop, float("-inf"))
    return torch.softmax(scores, dim=-1)


def greedy_accept(drafts: torch.Tensor, target_logits: torch.Tensor) -> tuple[int, int]:
    """drafts (d,), target_logits (d+1, V) -> (accepted a, bonus token argmax p_{a+1})."""
    best = target_logits.argmax(dim=-1).cpu()  # (d+1,) beside the drafts, which live on the CPU
    d = drafts.shape[0]
    mismatch = (drafts != best[:d]).nonzero()
    a = int(mismatch[0, 0]) if mismatch.numel() else d
    return a, int(best[a])


def text_match(drafts, text) -> int:
    """Greedy verification against the target's known greedy text (`text`, the tokens after the
    committed ones): how many drafts equal its next tokens, as `greedy_accept` would find."""
    k = min(len(drafts), len(text))
    differ = [i for i in range(k) if int(drafts[i]) != int(text[i])]
    return differ[0] if differ else k


class Randomness:
    """A run's random numbers when sampling, from one seeded CPU generator.

    Each round opens with `start_round(length, width)`, which draws the round's shared uniforms:
    u[i, r] for acceptance tests (draft i + 1 of a chain reads u[i, 0]; a tree node at depth i + 1
    and sibling rank r reads u[i, r]) and w[i] for drawing draft i + 1 from its proposal
    distribution (`draw`, by the inverse CDF). Whatever reads the same key within a round (the
    oracle's look-ahead and the verification) sees the same number, so a(d) is one function of d
    and a draft is the same token however many drafts are drawn. `sample` draws a fresh token: a
    correction, a bonus, an AR step. Tests swap in a source that enumerates every outcome
    (tests/exact.py), so every random choice of a round goes through these three methods.
    """

    def __init__(self, seed: int = 0):
        self.generator = torch.Generator().manual_seed(int(seed))
        self._u = self._w = None

    @classmethod
    def given(cls, uniforms: torch.Tensor, seed: int = 0) -> "Randomness":
        """A source whose acceptance uniforms are `uniforms` ((length,) or (length, width)), for tests."""
        rng = cls(seed)
        rng._u = uniforms.double().reshape(uniforms.shape[0], -1)
        return rng

    def start_round(self, length: int, width: int = 1) -> None:
        self._u = torch.rand(length, width, generator=self.generator, dtype=torch.float64)  # (length, width)
        self._w = torch.rand(length, generator=self.generator, dtype=torch.float64)  # (length,)

    def below(self, key: int | tuple[int, int], threshold: float) -> bool:
        """u[key] < threshold: an acceptance test (a probability threshold / ratio)."""
        i, r = key if isinstance(key, tuple) else (key, 0)
        return float(self._u[i, r]) < threshold

    def draw(self, key: int, probs: torch.Tensor) -> int:
        """Draft key + 1 drawn from `probs` (V,) with the round's w[key] (inverse CDF)."""
        cdf = probs.double().cpu().cumsum(0)  # (V,)
        index = int(torch.searchsorted(cdf, float(self._w[key]) * float(cdf[-1]), right=True))
        return min(index, int(probs.nonzero()[-1]))  # never a token of probability 0

    def sample(self, probs: torch.Tensor) -> int:
        """A fresh token from `probs` (V,)."""
        return int(torch.multinomial(probs.float().cpu(), 1, generator=self.generator))


def sample_accept(
    drafts: torch.Tensor,
    draft_probs: torch.Tensor,
    target_logits: torch.Tensor,
    cfg: SamplingConfig,
    rng: Randomness,
) -> tuple[int, int]:
    """Speculative sampling over one round.

    drafts (d,), draft_probs (d, V) = q_1..q_d (full vocabulary, the distributions the drafts were
    drawn from), target_logits (d+1, V), rng the run's randomness after the round's
    `start_round` (the oracle look-ahead reads the same uniforms, so a(d) is one function of d).
    Returns (accepted a, bonus / correction token).
    """
    p = probabilities(target_logits, cfg)  # (d+1, V), on the target's device
    draft_probs = draft_probs.to(p.device)
    d = drafts.shape[0]
    for i in range(d):
        x = int(drafts[i])
        p_x, q_x = float(p[i, x]), float(draft_probs[i, x])
        # Accept x_i with probability min(1, p_i(x_i) / q_i(x_i)).
        if q_x > 0.0 and rng.below(i, p_x / q_x):
            continue
        # Rejected: sample the correction from normalize(max(p_i - q_i, 0)).
        residual = (p[i] - draft_probs[i].double()).clamp_min(0.0)
        total = float(residual.sum())
        return i, rng.sample(residual / total if total > 0.0 else p[i])
    return d, rng.sample(p[d])


def acceptance_prefix(
    drafts: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_logits: torch.Tensor,
    cfg: SamplingConfig,
    rng: Randomness | None,
) -> torch.Tensor:
    """a(d) for d = 1..D from one verification of D drafts (the oracle look-ahead).

    Prefix acceptance makes a(d) = min(d, index of the first rejected draft), where a draft is
    rejected by the same test `greedy_accept` / `sample_accept` apply (the round's uniforms;
    `rng` None when greedy). Returns a LongTensor (D,).
    """
    D = drafts.shape[0]
    if cfg.greedy:
        bad = (drafts != target_logits[:D].argmax(dim=-1).cpu()).nonzero()
        first = int(bad[0, 0]) if bad.numel() else D
    else:
        p = probabilities(target_logits[:D], cfg)
        p_x = p.gather(1, drafts.view(-1, 1).to(p.device)).view(-1).tolist()
        q_x = draft_probs.double().gather(1, drafts.view(-1, 1)).view(-1).tolist()
        first = next((i for i in range(D) if not (q_x[i] > 0.0 and rng.below(i, p_x[i] / q_x[i]))), D)
    return torch.clamp(torch.arange(1, D + 1), max=first)
