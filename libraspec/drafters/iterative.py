"""Iterative block drafting (Fast-dLLM-style): a block unmasked over several passes.

A step drafts n positions after the chain. Pass 1 sees `[anchor, chain, MASK x n]`, exactly the
single-pass drafter's input (`block.BlockDraft`). Every pass fixes each still-masked position whose
peak probability reaches `threshold`, or, when none does, the single most confident one (so a
block takes 1..n passes); the next pass sees the fixed tokens as clean inputs and predicts the
rest again. q_i is position i's peak probability in the pass that fixed it, and that pass's
distribution is its proposal (what a sampled draft is drawn from, after d is chosen) and its
tree candidates. Which positions a pass fixes depends on peaks and chain tokens only, never on a
sampled value, so sampling stays lossless (docs/ARCHITECTURE.md, "Lossless verification").

Cost: every pass is a block-diffusion pass. A step's last pass is its kept step; the passes
before it are listed in `discarded` (their predictions for positions left masked are dropped),
so the engine, traces and replay price every pass a round ran (`cost.drafting_s`).
"""

from __future__ import annotations

from typing import Sequence

import torch

from ..cost import DIFFUSION, Drafting
from ..verify import probabilities
from .block import BlockDiffusionDrafter, BlockDraft

THRESHOLD = 0.9  # Fast-dLLM's confidence threshold for parallel unmasking


class IterativeBlockDraft(BlockDraft):
    """One round of iterative block drafting."""

    def __init__(self, *args, threshold: float = THRESHOLD):
        super().__init__(*args)
        self.threshold = float(threshold)
        self.step_passes: list[int] = []  # passes each step ran
        self._extra: list[tuple[int, str]] = []  # (step, source) of every pass but each step's last

    @property
    def discarded(self) -> list[tuple[int, str]]:
        return self._extra

    def _step(self):
        n, device, greedy = self.n, self.device, self.sampling.greedy
        start = [self.anchor] + self.tokens
        fixed = torch.full((n,), -1, dtype=torch.long, device=device)  # draft-vocabulary index, -1: masked
        peaks = torch.zeros(n, dtype=torch.float64, device=device)
        dists: list[torch.Tensor | None] = [None] * n
        positions = torch.arange(self.anchor_position, self.anchor_position + len(start) + n, device=device)
        passes = 0
        while bool((fixed < 0).any()):
            open_ = fixed < 0  # (n,)
            tail = torch.where(open_, self.mask_token_id, self.module.to_target_ids(fixed.clamp(min=0)))
            block = torch.cat([torch.tensor(start, dtype=torch.long, device=device), tail]).view(1, -1)  # (1, Q)
            mask = torch.cat([torch.zeros(len(start), dtype=torch.bool, device=device), open_]).view(1, -1)
            logits = self.module.draft_logits(self.cache, block, positions.view(1, -1), mask)[0, -n:]  # (n, V_d)
            probs = torch.softmax(logits.double(), dim=-1) if greedy else probabilities(logits, self.sampling)
            peak, choice = probs.max(dim=-1)  # (n,)
            take = open_ & (peak >= self.threshold)
            if not bool(take.any()):
                take = torch.zeros_like(open_)
                take[torch.where(open_, peak, -1.0).argmax()] = True
            fixed = torch.where(take, choice, fixed)
            peaks = torch.where(take, peak, peaks)
            for j in torch.nonzero(take).view(-1).tolist():
                dists[j] = probs[j]
            passes += 1
        step = len(self.step_passes)
        self.step_passes.append(passes)
        self._extra += [(step, DIFFUSION)] * (passes - 1)
        probs = torch.stack(dists)  # (n, V_d) each position's proposal
        self._dists.append(probs)
        full = None if greedy else self.module.to_full_vocab(probs).cpu()  # (n, V)
        return self.module.to_target_ids(fixed).tolist(), peaks.tolist(), full, DIFFUSION


class IterativeBlockDrafter(BlockDiffusionDrafter):
    """The block-diffusion module drafting by iterative unmasking; same weights, same context."""

    name = "fastdllm"

    @classmethod
    def drafting(cls, kept: Sequence[str] = (), n: int | None = None) -> Drafting:
        """A round's drafting priced at its most: n passes a block (a pass fixes at least one of
        its n positions). The engine and replay price the passes a round really ran."""
        if n is None:
            raise ValueError("an iterative round's price needs the drafter's n (its most passes a block)")
        return Drafting((DIFFUSION,), passes=int(n))

    def __init__(self, module, target, threshold: float = THRESHOLD):
        super().__init__(module, target)
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"the unmasking threshold must lie in (0, 1], got {threshold}")
        self.threshold = float(threshold)

    def start_round(self, context, ids, sampling) -> IterativeBlockDraft:
        args = (self.module, context, ids[-1], len(ids) - 1, self.vocab_size, sampling)
        return IterativeBlockDraft(*args, threshold=self.threshold)
