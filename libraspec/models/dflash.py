"""DFlash-style block-diffusion drafter in native PyTorch; loads DFlash checkpoints.

One pass drafts a block `[anchor, MASK x (block_size - 1)]`: n = block_size - 1 draft
tokens, each with confidence q_i = the drafter's probability of its proposed token
(docs/ARCHITECTURE.md, "The drafter interface"). Keys/values of every layer are [context ; block] where the context
is the fused target features: hidden states of the tapped target layers
(`target_layer_ids`; id i is `hidden_states[i + 1]`, index 0 being the embeddings)
concatenated to (B, C, L*H_t), then `hidden_norm(fc(.))`. The same fused context feeds
every layer's own k_proj/v_proj (+ k_norm, RoPE at the context positions); context K/V
are cached per layer, block K/V never are. Embeddings and LM head are the target's.

Checkpoint format (DFlash): `config.json` (see `dflash_config.py`) and `model.safetensors` with
unprefixed keys (`fc.weight`, `layers.0.self_attn.q_proj.weight`, ..., `norm.weight`).

Project extensions (assets/TRAINING.md says why each exists), off unless named in `libraspec_config`:
`slot_embeddings` (a learned vector per mask slot + the anchor's embedding on every mask
slot), `learned_temperature` (logits / exp(log_temperature)), `feature_stats`
(standardise then clip the concatenated features before `fc`), `draft_vocab_size`
(head restricted to the rows `draft_vocab_ids` of the target head; proposals are mapped
back to target ids).

Slot index of a block position = its offset inside the current run of masks (1 for the
first mask after a clean token, ...), capped at block_size - 1; clean tokens (the
anchor, earlier drafts fed back in) have slot 0. So `[a, d_1..d_15, MASK x 15]` gives
its masks the same slots 1..15 and the same "anchor" (d_15, the clean token right
before the run) as a plain `[a, MASK x 15]` block. Which positions are masks is
`block_ids == mask_token_id` unless a (B, Q) bool `mask` is passed (needed when the
mask id can also be a real drafted token).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from .checkpoint import check_state, load_module, target_parts, write_folder
from .dflash_config import EXTENSIONS, DFlashConfig, default_target_layer_ids
from .layers import DrafterLayer, RMSNorm, rope_cos_sin, tapped_features


@dataclass
class DrafterCache:
    """Per-layer context keys/values, each (B, nkv, C, D); empty lists before any context."""

    keys: list[torch.Tensor] = field(default_factory=list)
    values: list[torch.Tensor] = field(default_factory=list)

    @property
    def length(self) -> int:
        return self.keys[0].shape[2] if self.keys else 0


def _as_batch(positions: torch.Tensor, batch: int, length: int) -> torch.Tensor:
    positions = torch.as_tensor(positions, dtype=torch.long)
    if positions.dim() == 1:
        positions = positions.expand(batch, -1)
    if tuple(positions.shape) != (batch, length):
        raise ValueError(f"positions of shape {tuple(positions.shape)} do not match ({batch}, {length}) or ({length},)")
    return positions


class DFlashDrafter(nn.Module):
    """The drafter: fc + hidden_norm on target features, decoder layers, norm, target head."""

    def __init__(self, config: DFlashConfig, embed_tokens: nn.Embedding, lm_head: nn.Linear):
        super().__init__()
        c = config
        if tuple(embed_tokens.weight.shape) != (c.vocab_size, c.hidden_size):
            raise ValueError(
                f"target embeddings {tuple(embed_tokens.weight.shape)} do not match the drafter's "
                f"(vocab_size {c.vocab_size}, hidden_size {c.hidden_size})"
            )
        if tuple(lm_head.weight.shape) != (c.vocab_size, c.hidden_size):
            raise ValueError(
                f"target lm_head {tuple(lm_head.weight.shape)} does not match the drafter's "
                f"(vocab_size {c.vocab_size}, hidden_size {c.hidden_size})"
            )
        self.config, self.block_size, self.mask_token_id = c, c.block_size, c.mask_token_id
        self.target_layer_ids = list(c.target_layer_ids)
        self.feature_dim = len(self.target_layer_ids) * c.hidden_size  # L * H_t
        # Shared with the target, deliberately not registered: never saved, trained or moved here.
        self.__dict__["embed_tokens"], self.__dict__["lm_head"] = embed_tokens, lm_head
        self.fc = nn.Linear(self.feature_dim, c.hidden_size, bias=False)
        self.hidden_norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.layers = nn.ModuleList(DrafterLayer.of(c, c.attention_bias) for _ in range(c.num_hidden_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        if c.slot_embeddings:
            self.slot_embeddings = nn.Parameter(torch.randn(c.block_size, c.hidden_size) * 0.02)
        if c.learned_temperature:
            self.log_temperature = nn.Parameter(torch.zeros(()))
        if c.feature_stats:
            self.register_buffer("feature_mean", torch.zeros(self.feature_dim))
            self.register_buffer("feature_std", torch.ones(self.feature_dim))
        if c.draft_vocab_size:
            self.register_buffer("draft_vocab_ids", torch.arange(c.draft_vocab_size))

    @property
    def n(self) -> int:
        """Drafts per pass: the config's block_size counts the anchor, so n = block_size - 1."""
        return int(self.block_size) - 1

    # ---- inputs -------------------------------------------------------------------

    def target_features(self, hidden_states) -> torch.Tensor:
        """Concatenate the tapped layers of a transformers `hidden_states` tuple -> (B, T, L*H_t)."""
        return tapped_features(hidden_states, self.target_layer_ids, self.config.num_target_layers)

    def fuse_context(self, features: torch.Tensor) -> torch.Tensor:
        """(B, C, L*H_t) target features -> (B, C, H) fused context (optionally standardised first)."""
        if features.dim() != 3 or features.shape[-1] != self.feature_dim:
            raise ValueError(f"features must be (B, C, {self.feature_dim}), got {tuple(features.shape)}")
        if self.config.feature_stats:
            z = (features.float() - self.feature_mean.float()) / self.feature_std.float()
            features = z.clamp(-self.config.feature_clip, self.config.feature_clip)
        return self.hidden_norm(self.fc(features.to(self.fc.weight.dtype)))

    def embed_block(self, block_ids: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Block inputs (B, Q) -> (B, Q, H): target embeddings (+ slot and anchor embeddings if on)."""
        x = self.embed_tokens(block_ids)  # (B, Q, H)
        if not self.config.slot_embeddings:
            return x.to(self.fc.weight.dtype)
        mask = block_ids == self.mask_token_id if mask is None else mask.bool()
        idx = torch.arange(block_ids.shape[1], device=block_ids.device).expand_as(block_ids)
        last_clean = torch.where(mask, -1, idx).cummax(dim=1).values  # (B, Q) index of the run's anchor
        slot = (idx - last_clean).clamp(max=self.block_size - 1)  # 0 on clean tokens
        anchor = torch.gather(x, 1, last_clean.clamp(min=0)[..., None].expand_as(x))
        anchor = anchor * (mask & (last_clean >= 0))[..., None]
        return (x + anchor).to(self.fc.weight.dtype) + self.slot_embeddings[slot]

    # ---- the shared layer stack and head ------------------------------------------

    def _run_layers(self, x, positions, context_kv, attn_mask=None) -> torch.Tensor:
        """Every layer over block states x (B, Q, H) with per-layer context K/V; same code for both paths."""
        cos, sin = rope_cos_sin(positions.to(x.device), self.config.head_dim, self.config.rope_theta)
        for layer, (k, v) in zip(self.layers, context_kv):
            x = layer(x, cos, sin, k, v, attn_mask)
        return x

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        """Final norm then the target head (draft-vocabulary rows only) -> logits (.., V_d)."""
        weight, bias = self.lm_head.weight, self.lm_head.bias
        if self.config.draft_vocab_size:
            weight = weight.index_select(0, self.draft_vocab_ids)
            bias = None if bias is None else bias.index_select(0, self.draft_vocab_ids)
        h = self.norm(hidden).to(weight.dtype)  # (.., H)
        if self.config.learned_temperature:  # (h W^T + b) / t, dividing the H-wide h, not V_d-wide logits
            t = self.log_temperature.exp()
            return nn.functional.linear(h / t, weight, None if bias is None else bias / t)
        return nn.functional.linear(h, weight, bias)

    # ---- inference path -----------------------------------------------------------

    def new_cache(self) -> DrafterCache:
        return DrafterCache()

    def extend_context(self, cache: DrafterCache, features: torch.Tensor, positions: torch.Tensor) -> None:
        """Project features (B, C_new, L*H_t) at `positions` and append their K/V to every layer."""
        ctx = self.fuse_context(features)  # (B, C_new, H)
        if cache.keys and cache.keys[0].shape[0] != ctx.shape[0]:
            raise ValueError(f"batch {ctx.shape[0]} does not match the cache's {cache.keys[0].shape[0]}")
        positions = _as_batch(positions, ctx.shape[0], ctx.shape[1]).to(ctx.device)
        cos, sin = rope_cos_sin(positions, self.config.head_dim, self.config.rope_theta)
        new = [layer.context_kv(ctx, cos, sin) for layer in self.layers]
        cache.keys = [k if not cache.keys else torch.cat([cache.keys[i], k], 2) for i, (k, _) in enumerate(new)]
        cache.values = [v if not cache.values else torch.cat([cache.values[i], v], 2) for i, (_, v) in enumerate(new)]

    def crop(self, cache: DrafterCache, length: int) -> None:
        """Keep the first `length` context entries (the drafter's only rollback)."""
        if not 0 <= length <= cache.length:
            raise ValueError(f"cannot crop a drafter cache of {cache.length} entries to {length}")
        cache.keys = [k[:, :, :length] for k in cache.keys]
        cache.values = [v[:, :, :length] for v in cache.values]

    def draft_logits(
        self, cache: DrafterCache, block_ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Logits (B, Q, V_d) of a block (B, Q) attending to all cached context and itself; cache unchanged."""
        b, q = block_ids.shape
        positions = _as_batch(positions, b, q)
        x = self.embed_block(block_ids, mask)  # (B, Q, H)
        if cache.keys:
            if cache.keys[0].shape[0] != b:
                raise ValueError(f"block batch {b} does not match the cache's {cache.keys[0].shape[0]}")
            context_kv = list(zip(cache.keys, cache.values))
        else:
            c = self.config
            empty = x.new_zeros(b, c.num_key_value_heads, 0, c.head_dim)
            context_kv = [(empty, empty)] * len(self.layers)
        return self.head(self._run_layers(x, positions, context_kv))

    # ---- training path ------------------------------------------------------------

    def forward_train(
        self,
        features: torch.Tensor,
        block_ids: torch.Tensor,
        block_positions: torch.Tensor,
        context_limit: torch.Tensor,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """K blocks per sequence in one attention call -> logits (B, K, Q, V_d).

        features (B, T, L*H_t) cover positions 0..T-1; block k of row b sees context
        positions < context_limit[b, k] and its own Q states, bidirectionally.
        """
        b, k, q = block_ids.shape
        t = features.shape[1]
        if tuple(block_positions.shape) != (b, k, q) or tuple(context_limit.shape) != (b, k):
            raise ValueError(
                f"block_positions {tuple(block_positions.shape)} / context_limit "
                f"{tuple(context_limit.shape)} do not match blocks ({b}, {k}, {q})"
            )
        if bool((context_limit < 0).any()) or bool((context_limit > t).any()):
            raise ValueError(f"context_limit must lie in [0, {t}]")
        ctx = self.fuse_context(features)  # (B, T, H)
        cos, sin = rope_cos_sin(
            torch.arange(t, device=ctx.device).expand(b, t), self.config.head_dim, self.config.rope_theta
        )
        context_kv = [layer.context_kv(ctx, cos, sin) for layer in self.layers]
        flat_mask = None if mask is None else mask.reshape(b * k, q)
        x = self.embed_block(block_ids.reshape(b * k, q), flat_mask).reshape(b, k * q, -1)  # (B, KQ, H)
        block_of = torch.arange(k, device=ctx.device).repeat_interleave(q)  # (KQ,)
        own_block = (block_of[:, None] == block_of[None, :]).expand(b, k * q, k * q)
        sees_ctx = torch.arange(t, device=ctx.device) < context_limit.to(ctx.device)[..., None]  # (B, K, T)
        attn_mask = torch.cat([sees_ctx.repeat_interleave(q, dim=1), own_block], dim=-1)[:, None]  # (B,1,KQ,T+KQ)
        hidden = self._run_layers(x, block_positions.reshape(b, k * q), context_kv, attn_mask)
        return self.head(hidden).reshape(b, k, q, -1)

    # ---- vocabulary and proposals -------------------------------------------------

    def to_target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary indices -> target token ids (identity without a draft vocabulary)."""
        return self.draft_vocab_ids[draft_ids] if self.config.draft_vocab_size else draft_ids

    def to_full_vocab(self, probs: torch.Tensor) -> torch.Tensor:
        """Probabilities over the draft vocabulary (.., V_d) -> the target vocabulary (.., V), zero elsewhere."""
        if not self.config.draft_vocab_size:
            return probs
        full = probs.new_zeros(*probs.shape[:-1], self.config.vocab_size)
        return full.index_copy_(-1, self.draft_vocab_ids.to(probs.device), probs)

    def propose(
        self, logits: torch.Tensor, temperature: float = 0.0, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Tokens (target ids) and their confidences q_i from logits (B, Q, V_d).

        Greedy (temperature 0): argmax, q_i its probability. Sampling: a draw from
        softmax(logits / temperature), q_i its probability under that distribution.
        """
        logits = logits.float()
        if temperature > 0:
            p = torch.softmax(logits / temperature, dim=-1)
            idx = torch.multinomial(p.reshape(-1, p.shape[-1]), 1, generator=generator).view(p.shape[:-1])
            return self.to_target_ids(idx), p.gather(-1, idx[..., None])[..., 0]
        top, idx = logits.max(dim=-1)
        return self.to_target_ids(idx), (top - logits.logsumexp(dim=-1)).exp()  # q_i = softmax(logits)[argmax]

    @torch.no_grad()
    def set_draft_vocab(self, ids) -> None:
        ids = torch.as_tensor(ids, dtype=torch.long).flatten()
        if not self.config.draft_vocab_size or ids.numel() != self.config.draft_vocab_size:
            raise ValueError(
                f"draft vocabulary needs exactly draft_vocab_size={self.config.draft_vocab_size} ids, got {ids.numel()}"
            )
        if ids.unique().numel() != ids.numel() or int(ids.min()) < 0 or int(ids.max()) >= self.config.vocab_size:
            raise ValueError(f"draft vocabulary ids must be distinct and in [0, {self.config.vocab_size})")
        self.draft_vocab_ids.copy_(ids)

    @torch.no_grad()
    def set_feature_stats(self, mean: torch.Tensor, std: torch.Tensor, min_std: float = 1e-4) -> None:
        if not self.config.feature_stats:
            raise ValueError("this drafter was built without feature_stats")
        if tuple(mean.shape) != (self.feature_dim,) or tuple(std.shape) != (self.feature_dim,):
            raise ValueError(f"feature mean/std must have shape ({self.feature_dim},)")
        self.feature_mean.copy_(mean)
        self.feature_std.copy_(std.clamp(min=min_std))

    @torch.no_grad()
    def init_from_target(self, target_model, layer_ids: list[int]) -> list[str]:
        """Copy target decoder layers `layer_ids` (and the final norm) where shapes match,
        then zero o_proj and down_proj so each drafter layer starts as the identity.
        Returns the drafter keys that were copied."""
        model, _, _ = target_parts(target_model)
        source_layers = model.get_decoder().layers
        if len(layer_ids) != len(self.layers):
            raise ValueError(f"need {len(self.layers)} target layer ids, got {len(layer_ids)}")
        copied = []
        for j, (dst, i) in enumerate(zip(self.layers, layer_ids)):
            src = source_layers[i].state_dict()
            for name, p in dst.state_dict().items():
                if name in src and src[name].shape == p.shape:
                    p.copy_(src[name])
                    copied.append(f"layers.{j}.{name}")
            for proj in (dst.self_attn.o_proj, dst.mlp.down_proj):
                proj.weight.zero_()
                if proj.bias is not None:
                    proj.bias.zero_()
        final = getattr(model.get_decoder(), "norm", None)
        if final is not None and final.weight.shape == self.norm.weight.shape:
            self.norm.weight.copy_(final.weight)
            copied.append("norm.weight")
        return copied

    # ---- checkpoints --------------------------------------------------------------

    def save_pretrained(self, path) -> None:
        """Write config.json + model.safetensors (unprefixed keys, no embeddings/head), atomically."""
        state = {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}
        write_folder(path, self.config.to_dict(), state)

    def load_checkpoint_state(self, state: dict[str, torch.Tensor]) -> None:
        """Load an unprefixed state dict; a missing, unexpected or mis-shaped key raises ValueError."""
        check_state(self.state_dict(), state, "drafter")
        self.load_state_dict(state)

    @classmethod
    def from_pretrained(cls, path, target_model) -> "DFlashDrafter":
        """Load a DFlash-format directory and bind it to the target's embeddings and head."""
        return load_module(cls, DFlashConfig, path, target_model, "drafter")


__all__ = ["EXTENSIONS", "DFlashConfig", "DFlashDrafter", "DrafterCache", "default_target_layer_ids"]
