"""Qwen3-style building blocks of the DFlash drafter (native PyTorch, no remote code).

The drafter's decoder layer differs from a causal LM layer in one way (DFlash, KV
injection): its keys and values are the concatenation of (a) the projected target
context features, computed once per context position and cached, and (b) the block's
own states; queries come from the block only, and nothing is causal. Parameter names
follow Qwen3 (`self_attn.q_proj`, `self_attn.q_norm`, `mlp.gate_proj`,
`input_layernorm`, ...) so DFlash checkpoints load by name.

Shapes: B batch, C context length, Q block length, H hidden size, nh query heads,
nkv key/value heads, D head dim.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

ACTIVATIONS = {"silu": F.silu, "gelu": F.gelu, "relu": F.relu}


class RMSNorm(nn.Module):
    """Root-mean-square norm computed in float32, as Qwen3 and Llama do."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


def rope_cos_sin(positions: torch.Tensor, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotary tables for integer `positions` (B, T) -> cos, sin (B, 1, T, D) in float32.

    The inverse frequencies are recomputed here (D/2 numbers) so that casting the
    module to bf16 never degrades them.
    """
    exponent = torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim
    inv_freq = 1.0 / (theta**exponent)  # (D/2,)
    angles = positions.float()[..., None] * inv_freq  # (B, T, D/2)
    angles = torch.cat([angles, angles], dim=-1)[:, None]  # (B, 1, T, D)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x (B, heads, T, D) by the tables (B, 1, T, D) (rotate-half convention)."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return (x.float() * cos + rotated.float() * sin).to(x.dtype)


class ContextAttention(nn.Module):
    """Attention whose K/V are [cached context K/V ; block K/V] and whose Q is the block."""

    def __init__(self, hidden: int, heads: int, kv_heads: int, head_dim: int, eps: float, bias: bool):
        super().__init__()
        if heads % kv_heads:
            raise ValueError(f"num_attention_heads ({heads}) must be a multiple of num_key_value_heads ({kv_heads})")
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.q_proj = nn.Linear(hidden, heads * head_dim, bias=bias)
        self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=bias)
        self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=bias)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=bias)
        self.q_norm = RMSNorm(head_dim, eps)  # per-head norms, as Qwen3
        self.k_norm = RMSNorm(head_dim, eps)

    def key_value(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """K/V of states x (B, T, H): k_norm then RoPE on keys -> two (B, nkv, T, D)."""
        b, t, _ = x.shape
        k = self.k_norm(self.k_proj(x).view(b, t, self.kv_heads, self.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        return apply_rope(k, cos, sin), v

    def forward(
        self,
        x: torch.Tensor,  # (B, Q, H) normed block states
        cos: torch.Tensor,  # (B, 1, Q, D) block rotary tables
        sin: torch.Tensor,
        ctx_k: torch.Tensor,  # (B, nkv, C, D) context keys (already rotated)
        ctx_v: torch.Tensor,  # (B, nkv, C, D)
        mask: torch.Tensor | None,  # (B, 1, Q, C + Q) bool (True = may attend) or None = all
    ) -> torch.Tensor:
        b, q_len, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(b, q_len, self.heads, self.head_dim)).transpose(1, 2)
        q = apply_rope(q, cos, sin)  # (B, nh, Q, D)
        k_blk, v_blk = self.key_value(x, cos, sin)  # (B, nkv, Q, D)
        k = torch.cat([ctx_k, k_blk], dim=2)  # (B, nkv, C + Q, D)
        v = torch.cat([ctx_v, v_blk], dim=2)
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, enable_gqa=self.heads != self.kv_heads
        )  # (B, nh, Q, D), scale D**-0.5, no causal mask
        return self.o_proj(out.transpose(1, 2).reshape(b, q_len, self.heads * self.head_dim))


class GatedMLP(nn.Module):
    """SwiGLU feed-forward: down(act(gate(x)) * up(x))."""

    def __init__(self, hidden: int, intermediate: int, act: str):
        super().__init__()
        if act not in ACTIVATIONS:
            raise ValueError(f"hidden_act {act!r} is not supported; use one of {sorted(ACTIVATIONS)}")
        self.act = ACTIVATIONS[act]
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class DrafterLayer(nn.Module):
    """Pre-norm decoder layer: x + attn(norm(x), context), then + mlp(norm(.))."""

    def __init__(
        self, hidden: int, intermediate: int, heads: int, kv_heads: int, head_dim: int, eps: float, bias: bool, act: str
    ):
        super().__init__()
        self.self_attn = ContextAttention(hidden, heads, kv_heads, head_dim, eps, bias)
        self.mlp = GatedMLP(hidden, intermediate, act)
        self.input_layernorm = RMSNorm(hidden, eps)
        self.post_attention_layernorm = RMSNorm(hidden, eps)

    @classmethod
    def of(cls, c, bias: bool) -> DrafterLayer:
        """A layer of a drafter config `c` (its widths, heads, norm eps and activation)."""
        return cls(
            c.hidden_size,
            c.intermediate_size,
            c.num_attention_heads,
            c.num_key_value_heads,
            c.head_dim,
            c.rms_norm_eps,
            bias,
            c.hidden_act,
        )

    def context_kv(self, ctx: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Context K/V of the fused target features ctx (B, C, H).

        DFlash projects the fused context with the layer's own k_proj/v_proj directly
        (no input_layernorm on the context: `hidden_norm` already normalised it).
        """
        return self.self_attn.key_value(ctx, cos, sin)

    def forward(self, x, cos, sin, ctx_k, ctx_v, mask=None) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, ctx_k, ctx_v, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


def tapped_features(hidden_states, layer_ids, num_target_layers: int) -> torch.Tensor:
    """The target layers `layer_ids` of a transformers `hidden_states` tuple (index 0 the embeddings,
    id i is hidden_states[i + 1]), concatenated -> (B, T, L*H); what both drafters read."""
    if len(hidden_states) != num_target_layers + 1:
        raise ValueError(
            f"expected {num_target_layers + 1} hidden states (embeddings + one per target layer), "
            f"got {len(hidden_states)}"
        )
    return torch.cat([hidden_states[i + 1] for i in layer_ids], dim=-1)
