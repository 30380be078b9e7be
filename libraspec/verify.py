"""Verification: greedy acceptance and lossless speculative sampling.

Names follow Leviathan et al. (2023) and the LibraSpec paper (section 3.1): x_i is draft
token i, q_i(.) the drafter's distribution at position i, p_i(.) the target's. The target
verifies `[last token, x_1..x_d]` in one pass and so yields p_1..p_{d+1}.

Greedy: accept the longest prefix with x_i == argmax p_i, then take argmax p_{a+1} as the
bonus / correction token. Sampling: accept x_i with probability min(1, p_i(x_i) / q_i(x_i));
on the first rejection sample from normalize(max(p_i - q_i, 0)); after d acceptances sample
the bonus from p_{d+1}. The committed tokens are then distributed exactly as the target's.
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


def sample_accept(
    drafts: torch.Tensor,
    draft_probs: torch.Tensor,
    target_logits: torch.Tensor,
    cfg: SamplingConfig,
    uniforms: torch.Tensor,
    generator: torch.Generator,
) -> tuple[int, int]:
    """Speculative sampling over one round.

    drafts (d,), draft_probs (d, V) = q_1..q_d (full vocabulary), target_logits (d+1, V),
    uniforms (>= d,) the round's shared random numbers r_i (the oracle look-ahead reuses
    them, so a(d) is one function of d). Returns (accepted a, bonus / correction token).
    """
    p = probabilities(target_logits, cfg)  # (d+1, V), on the target's device
    draft_probs = draft_probs.to(p.device)
    d = drafts.shape[0]
    for i in range(d):
        x = int(drafts[i])
        p_x, q_x = float(p[i, x]), float(draft_probs[i, x])
        # Accept x_i with probability min(1, p_i(x_i) / q_i(x_i)).
        if q_x > 0.0 and float(uniforms[i]) * q_x < p_x:
            continue
        # Rejected: sample the correction from normalize(max(p_i - q_i, 0)).
        residual = (p[i] - draft_probs[i].double()).clamp_min(0.0)
        total = float(residual.sum())
        dist = residual / total if total > 0.0 else p[i]
        return i, int(torch.multinomial(dist.float().cpu(), 1, generator=generator))  # the generator is a CPU one
    return d, int(torch.multinomial(p[d].float().cpu(), 1, generator=generator))


def acceptance_prefix(
    drafts: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_logits: torch.Tensor,
    cfg: SamplingConfig,
    uniforms: torch.Tensor | None,
) -> torch.Tensor:
    """a(d) for d = 1..D from one verification of D drafts (the oracle look-ahead).

    Prefix acceptance makes a(d) = min(d, index of the first rejected draft), where a draft is
    rejected by the same test `greedy_accept` / `sample_accept` apply (shared uniforms).
    Returns a LongTensor (D,).
    """
    D = drafts.shape[0]
    if cfg.greedy:
        ok = drafts == target_logits[:D].argmax(dim=-1).cpu()
    else:
        p = probabilities(target_logits[:D], cfg)
        idx = drafts.view(-1, 1)
        p_x = p.gather(1, idx.to(p.device)).view(-1).cpu()
        q_x = draft_probs.double().gather(1, idx).view(-1)
        ok = (q_x > 0) & (uniforms[:D].double() * q_x < p_x)
    bad = (~ok).nonzero()
    first = int(bad[0, 0]) if bad.numel() else D
    return torch.clamp(torch.arange(1, D + 1), max=first)
