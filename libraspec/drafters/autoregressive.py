"""The EAGLE-3-style autoregressive drafter behind the drafter interface: one token per step.

Step 1 of a round reads the anchor x_L and the target's fused features of x_{L-1}; step k > 1 reads
the chain token drafted by step k - 1 and the head's own output hidden state there
(`models.eagle`). The chain takes each step's most likely token; q_i is its probability, and the
step's distribution is the proposal a sampled draft is drawn from after d is chosen
(`DraftBuffer.draw`), so, as for every drafter, no proposal depends on a sampled value. Each step is
one pass of the head, priced `eagle_s` (`cost.AUTOREGRESSIVE`); the context (the head's K/V over the
committed tokens) is brought up to date after every round, priced `eagle_fit_s`.
"""

from __future__ import annotations

from typing import Sequence

import torch

from ..cost import AUTOREGRESSIVE, EAGLE, Drafting
from ..verify import SamplingConfig, probabilities
from .base import DraftBuffer


class HeadDraft(DraftBuffer):
    """One round of autoregressive drafting by the head."""

    def __init__(self, head, cache, anchor: int, anchor_position: int, vocab_size: int, sampling: SamplingConfig):
        super().__init__(1, vocab_size, sampling)
        self.head, self.cache = head, cache
        self.anchor, self.anchor_position = int(anchor), int(anchor_position)
        h = head.config.hidden_size
        last = cache.features[:, -1:] if cache.length else None  # g_{L-1}, (1, 1, H)
        weight = head.fc.weight
        self._g = last if last is not None else torch.zeros(1, 1, h, dtype=weight.dtype, device=weight.device)
        self._round_kv: list = []  # the head's K/V of this round's steps
        self._dists: list[torch.Tensor] = []  # (V_d,) per step

    def _step(self):
        if len(self._round_kv) != len(self.tokens):
            raise RuntimeError("the eagle head drafts its own chain only; it cannot continue another drafter's")
        token = self.tokens[-1] if self.tokens else self.anchor
        position = self.anchor_position + len(self.tokens)
        logits, self._g = self.head.step(self.cache, token, self._g, position, self._round_kv)  # (V_d,)
        greedy = self.sampling.greedy
        probs = torch.softmax(logits.double(), dim=-1) if greedy else probabilities(logits[None], self.sampling)[0]
        choice = int(probs.argmax())
        self._dists.append(probs)
        full = None if greedy else self.head.to_full_vocab(probs[None]).cpu()  # (1, V)
        return [int(self.head.to_target_ids(torch.tensor(choice)))], [float(probs[choice])], full, EAGLE

    def candidates(self, i: int, k: int) -> tuple[list[int], list[float]]:
        row = self._dists[i]
        top = torch.topk(row, min(k, row.shape[0]))
        return self.head.to_target_ids(top.indices).tolist(), top.values.tolist()


class EagleDrafter:
    """Adapts an EAGLE-style head (`models.eagle.EagleHead`) of a pair."""

    name = "eagle"
    needs_features = True
    n = 1

    @classmethod
    def drafting(cls, kept: Sequence[str] = (), n: int | None = None) -> Drafting:
        return AUTOREGRESSIVE  # one head pass per draft, the head's upkeep after the round

    def __init__(self, head, target):
        if head is None:
            raise ValueError(
                "this model pair has no EAGLE-style head: train one with `scripts/train_eagle.sh` "
                "(assets/eagle) or choose another drafter"
            )
        cfg = head.config
        if cfg.vocab_size != target.vocab_size or cfg.hidden_size != target.hidden_size:
            raise ValueError(
                f"the eagle head (vocabulary {cfg.vocab_size}, hidden {cfg.hidden_size}) does not fit the target "
                f"(vocabulary {target.vocab_size}, hidden {target.hidden_size})"
            )
        if any(not 0 <= i < target.num_layers for i in head.target_layer_ids):
            raise ValueError(
                f"the eagle head taps layers {head.target_layer_ids} of a {target.num_layers}-layer target"
            )
        self.head = head
        self.vocab_size = target.vocab_size

    def new_context(self):
        return self.head.new_cache()

    def context_length(self, context) -> int:
        return context.length

    @torch.inference_mode()
    def fit_context(self, context, ids, hidden_states, first_position) -> None:
        keep, have = len(ids) - 1, context.length
        if have > keep:
            self.head.crop(context, keep)
        elif have < keep:
            feats = self.head.target_features(hidden_states)[:, : keep - have]  # (1, new, L*H)
            new_ids = torch.tensor([ids[have:keep]], device=feats.device)
            self.head.extend_context(context, new_ids, feats, first_position)

    def start_round(self, context, ids, sampling) -> HeadDraft:
        return HeadDraft(self.head, context, ids[-1], len(ids) - 1, self.vocab_size, sampling)
