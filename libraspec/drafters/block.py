"""The block-diffusion drafter (DFlash-style) behind the drafter interface.

A pass sees `[anchor, x_1..x_m (clean, drafted earlier this round), MASK x n]` and gives a
distribution for each of the next n positions; the chain `tokens` takes each position's most
likely token, and step b > 1 is conditioned on that chain (never on a sampled token, also when
sampling: drafts are drawn from these distributions after d is chosen, `DraftBuffer.draw`). q_i
is the probability of the chain's token, the distribution's peak. The context is the drafter's
K/V cache over the target's hidden-state features of every committed token but the newest.
"""

from __future__ import annotations

import torch

from ..cost import BLOCK_DIFFUSION, Drafting
from ..verify import SamplingConfig, probabilities
from .base import DraftBuffer


class BlockDraft(DraftBuffer):
    """One round of block-diffusion drafting."""

    def __init__(self, module, cache, anchor: int, anchor_position: int, vocab_size: int, sampling: SamplingConfig):
        super().__init__(module.n, vocab_size, sampling)
        self.module = module
        self.cache = cache
        self.anchor = int(anchor)
        self.anchor_position = int(anchor_position)
        self.mask_token_id = int(module.config.mask_token_id)
        self.device = next(module.parameters()).device
        self._dists: list[torch.Tensor] = []  # (n, V_d) per step: each position's distribution

    def _step(self):
        n, device = self.n, self.device
        ids = [self.anchor] + self.tokens + [self.mask_token_id] * n
        block = torch.tensor([ids], dtype=torch.long, device=device)  # (1, Q)
        positions = torch.arange(self.anchor_position, self.anchor_position + len(ids), device=device)
        logits = self.module.draft_logits(self.cache, block, positions.view(1, -1))[0, -n:]  # (n, V_d)
        greedy = self.sampling.greedy
        probs = torch.softmax(logits.double(), dim=-1) if greedy else probabilities(logits, self.sampling)  # (n, V_d)
        choice = probs.argmax(dim=-1)  # (n,) the chain
        self._dists.append(probs)
        q = probs.gather(1, choice.view(-1, 1)).view(-1)  # (n,) the peak of each distribution
        full = None if greedy else self.module.to_full_vocab(probs).cpu()  # (n, V) what drafts are drawn from
        return self.module.to_target_ids(choice).tolist(), q.tolist(), full, "dflash"

    def candidates(self, i: int, k: int) -> tuple[list[int], list[float]]:
        row = self._dists[i // self.n][i % self.n]  # (V_d,)
        top = torch.topk(row, min(k, row.shape[0]))
        return self.module.to_target_ids(top.indices).tolist(), top.values.tolist()


class BlockDiffusionDrafter:
    """Adapts a DFlash-format module (`models.dflash.DFlashDrafter` or a test double)."""

    name = "dflash"
    needs_features = True

    @classmethod
    def drafting(cls, kept=(), n=None) -> Drafting:
        return BLOCK_DIFFUSION  # a pass a step, the context upkeep after the round

    def __init__(self, module, target):
        check_compatible(target, module)
        self.module = module
        self.vocab_size = target.vocab_size
        self.n = module.n

    def new_context(self):
        return self.module.new_cache()

    def context_length(self, context) -> int:
        return context.length

    def fit_context(self, context, ids, hidden_states, first_position) -> None:
        keep, have = len(ids) - 1, context.length
        if have > keep:
            self.module.crop(context, keep)
        elif have < keep:
            feats = self.module.target_features(hidden_states)[:, : keep - have]  # (1, new, L*H)
            positions = torch.arange(first_position, first_position + feats.shape[1]).view(1, -1)
            self.module.extend_context(context, feats, positions)

    def start_round(self, context, ids, sampling) -> BlockDraft:
        return BlockDraft(self.module, context, ids[-1], len(ids) - 1, self.vocab_size, sampling)


def check_compatible(target, module) -> None:
    """A drafter must share the target's vocabulary and read hidden states it really has."""
    cfg = module.config
    if int(cfg.vocab_size) != target.vocab_size:
        raise ValueError(f"drafter vocabulary ({cfg.vocab_size}) differs from the target's ({target.vocab_size})")
    target_hidden = int(getattr(cfg, "target_hidden_size", None) or cfg.hidden_size)
    if target_hidden != target.hidden_size:
        raise ValueError(f"drafter expects target hidden size {target_hidden}, the target has {target.hidden_size}")
    bad = [i for i in module.target_layer_ids if not 0 <= i < target.num_layers]
    if bad:
        raise ValueError(f"drafter taps target layers {bad}, but the target has {target.num_layers} layers")
