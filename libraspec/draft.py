"""The round's draft buffer: the buffer protocol of DESIGN.md section 4 over a real drafter.

A drafter pass sees `[anchor, x_1..x_m (clean, drafted earlier this round), MASK x n]` and
proposes the next n tokens, so block b > 1 is conditioned on the tokens already drafted.
q_i is the drafter's probability of the token it proposed (its confidence).
"""
from __future__ import annotations

import time

import numpy as np
import torch

from .verify import SamplingConfig, probabilities


class DraftBuffer:
    """Drafts blocks on demand for one round; policies read `confidences` and call `extend`."""

    def __init__(self, drafter, cache, anchor: int, anchor_position: int, vocab_size: int,
                 sampling: SamplingConfig, generator: torch.Generator | None):
        self.drafter = drafter
        self.cache = cache
        self.anchor = int(anchor)
        self.anchor_position = int(anchor_position)
        self.vocab_size = int(vocab_size)
        self.sampling = sampling
        self.generator = generator
        self.block_size = int(drafter.block_size) - 1  # n: drafts per pass (b16 -> 15)
        self.mask_token_id = int(drafter.config.mask_token_id)
        self.tokens: list[int] = []
        self._confidences: list[float] = []
        self._probs: list[torch.Tensor] = []  # (n, V) per block, sampling only
        self.pass_seconds: list[float] = []  # wall time of each drafter pass
        self.device = next(drafter.parameters()).device

    @property
    def confidences(self) -> np.ndarray:
        return np.asarray(self._confidences, dtype=np.float64)  # (drafted,)

    @property
    def blocks(self) -> int:
        return len(self.pass_seconds)

    @property
    def seconds(self) -> float:
        return float(sum(self.pass_seconds))

    def draft_probs(self, d: int) -> torch.Tensor:
        """q_1..q_d over the full target vocabulary, (d, V); sampling mode only."""
        return torch.cat(self._probs, dim=0)[:d]

    def ensure(self, length: int) -> None:
        """Draft just enough blocks to hold `length` tokens."""
        missing = length - len(self.tokens)
        if missing > 0:
            self.extend(-(-missing // self.block_size))

    @torch.inference_mode()
    def extend(self, num_blocks: int) -> None:
        if num_blocks < 0:
            raise ValueError(f"num_blocks must be >= 0, got {num_blocks}")
        n = self.block_size
        for _ in range(num_blocks):
            start = time.perf_counter()
            ids = [self.anchor] + self.tokens + [self.mask_token_id] * n
            device = self.device
            block = torch.tensor([ids], dtype=torch.long, device=device)  # (1, Q)
            positions = torch.arange(self.anchor_position, self.anchor_position + len(ids), device=device)
            logits = self.drafter.draft_logits(self.cache, block, positions.view(1, -1))[0, -n:]  # (n, V_d)
            if self.sampling.greedy:
                probs = torch.softmax(logits.double(), dim=-1)  # (n, V_d)
                choice = probs.argmax(dim=-1)  # (n,)
            else:
                probs = probabilities(logits, self.sampling)  # (n, V_d)
                choice = torch.multinomial(probs.float().cpu(), 1, generator=self.generator).view(-1).to(device)
                full = torch.zeros(n, self.vocab_size, dtype=probs.dtype, device=probs.device)  # (n, V)
                vocab_ids = self.drafter.to_target_ids(torch.arange(probs.shape[-1], device=probs.device))
                self._probs.append(full.index_copy_(1, vocab_ids, probs).cpu())
            q = probs.gather(1, choice.view(-1, 1)).view(-1)  # (n,)
            self.tokens.extend(self.drafter.to_target_ids(choice).tolist())
            self._confidences.extend(q.tolist())
            self.pass_seconds.append(time.perf_counter() - start)
