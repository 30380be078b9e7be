"""Target wrapper: any transformers causal LM, one sequence, one KV cache.

The engine keeps one invariant: the target cache holds every committed token except the
newest one, which is the first input of the next round. A round feeds
`[last token, d drafts]` (d + 1 new positions), reads logits and the hidden states the
drafter taps, and then `crop_cache` drops the rejected tail. All cache calls go through
this module, so the transformers 5.x changes (`DynamicCache.crop` takes a negative count;
`past_key_values=` being renamed `cache=`) are handled in one place.

A draft tree is verified in one forward (`forward_tree`) with an additive 4-D attention mask
(a boolean one is read as additive 0/1 by the eager attention: measured wrong on transformers
5.x, so never used); `keep_rows` then moves the accepted path's K/V rows into place before the
crop.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch
from transformers import DynamicCache


def cache_length(cache: DynamicCache) -> int:
    return int(cache.get_seq_length())


def crop_cache(cache: DynamicCache, length: int) -> None:
    """Keep the first `length` positions of a transformers cache (transformers 5.x API)."""
    current = cache_length(cache)
    if length < 0 or length > current:
        raise ValueError(f"cannot crop a cache of {current} positions to {length}")
    if length < current:
        cache.crop(length - current)  # 5.x: a negative count removes that many positions


@torch.inference_mode()
def keep_rows(cache: DynamicCache, start: int, rows: list[int]) -> None:
    """Move the K/V of cache positions `rows` (ascending, each >= its destination) to positions
    start, start + 1, ... and keep nothing after them: a verified tree's accepted path."""
    if any(b <= a for a, b in zip(rows, rows[1:])) or (rows and (rows[0] < start or rows[-1] >= cache_length(cache))):
        raise ValueError(f"rows {rows} are not ascending positions from {start} inside the cache")
    index = torch.as_tensor(rows, dtype=torch.long)
    for layer in cache.layers:
        for kv in (layer.keys, layer.values):  # (1, H_kv, T, D)
            kv[:, :, start : start + len(rows)] = kv[:, :, index.to(kv.device)]
    crop_cache(cache, start + len(rows))


@dataclass
class TargetOutput:
    logits: torch.Tensor  # (T, V) float32 or float64, one row per new position
    hidden_states: tuple[torch.Tensor, ...]  # transformers' tuple: embeddings + one per layer, each (1, T, H)


class TargetModel:
    """A causal LM used as the speculative-decoding target (batch size 1)."""

    def __init__(self, model: torch.nn.Module):
        self.model = model.eval()
        self.config = model.config
        params = inspect.signature(model.forward).parameters
        self._cache_kwarg = "cache" if "cache" in params else "past_key_values"
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        self.hidden_size = int(self.config.hidden_size)
        self.num_layers = int(self.config.num_hidden_layers)
        self.max_positions = int(getattr(self.config, "max_position_embeddings", 2048))
        eos = getattr(model.generation_config, "eos_token_id", None) if hasattr(model, "generation_config") else None
        if eos is None:
            eos = getattr(self.config, "eos_token_id", None)
        self.eos_token_ids = frozenset([] if eos is None else ([eos] if isinstance(eos, int) else list(eos)))

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    def new_cache(self) -> DynamicCache:
        return DynamicCache(config=self.config)

    @torch.inference_mode()
    def forward(
        self, cache: DynamicCache, input_ids: list[int] | torch.Tensor, with_hidden: bool = True
    ) -> TargetOutput:
        """Feed new tokens after the cached ones; the cache grows by len(input_ids)."""
        ids = torch.as_tensor(input_ids, dtype=torch.long, device=self.device).view(1, -1)  # (1, T)
        start = cache_length(cache)
        if start + ids.shape[1] > self.max_positions:
            raise ValueError(
                f"sequence of {start + ids.shape[1]} positions exceeds the target's context window "
                f"({self.max_positions})"
            )
        positions = torch.arange(start, start + ids.shape[1], device=self.device).view(1, -1)
        return self._run(cache, ids, positions, None, with_hidden)

    @torch.inference_mode()
    def forward_tree(
        self,
        cache: DynamicCache,
        root: int,
        tokens: list[int],
        parents: list[int],
        depths: list[int],
        with_hidden: bool = True,
    ) -> TargetOutput:
        """Verify a draft tree after the cached prefix in one forward; the cache grows by 1 + N.

        Row 0 is `root` (the last committed token) at position P = cache length; node j (row
        j + 1) sits at position P + depths[j] and sees the prefix, the root, its ancestors and
        itself. Parents precede children (parents[j] < j, -1 for the root).
        """
        P, N = cache_length(cache), len(tokens)
        if P + max(depths, default=0) >= self.max_positions:
            raise ValueError(
                f"a tree of depth {max(depths)} after {P + 1} positions exceeds the target's "
                f"context window ({self.max_positions})"
            )
        sees = torch.cat(
            [torch.ones(N + 1, P, dtype=torch.bool), tree_visibility(parents)], dim=1
        )  # (1 + N, P + 1 + N)
        mask = torch.zeros(sees.shape, dtype=self.dtype).masked_fill(~sees, torch.finfo(self.dtype).min)
        ids = torch.as_tensor([root] + list(tokens), dtype=torch.long, device=self.device).view(1, -1)  # (1, 1 + N)
        positions = (P + torch.as_tensor([0] + list(depths), dtype=torch.long)).view(1, -1).to(self.device)
        return self._run(cache, ids, positions, mask.view(1, 1, *sees.shape).to(self.device), with_hidden)

    def _run(self, cache, ids, positions, mask, with_hidden: bool) -> TargetOutput:
        out = self.model(
            input_ids=ids,
            position_ids=positions,
            use_cache=True,
            output_hidden_states=with_hidden,
            **({} if mask is None else {"attention_mask": mask}),
            **{self._cache_kwarg: cache},
        )
        hidden = tuple(out.hidden_states) if with_hidden else ()
        logits = out.logits[0]  # (T, V)
        if logits.dtype in (torch.float16, torch.bfloat16):
            logits = logits.float()
        return TargetOutput(logits=logits, hidden_states=hidden)


def tree_visibility(parents) -> torch.Tensor:
    """(1 + N, 1 + N) bool: which rows of a tree verification row i attends to (docs/ARCHITECTURE.md,
    "A worked tree"). Row 0 is the root, row j + 1 node j; a row sees the root, its ancestors and
    itself (and, in the forward, the whole cached prefix). Parents precede children."""
    N = len(parents)
    sees = torch.eye(N + 1, dtype=torch.bool)  # (1 + N, 1 + N): row i sees column k
    sees[:, 0] = True
    for j, parent in enumerate(parents):
        if not -1 <= parent < j:
            raise ValueError(f"node {j} has parent {parent}: parents must precede their children")
        sees[j + 1] |= sees[parent + 1]
    return sees
