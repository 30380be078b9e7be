"""An EAGLE-3-style autoregressive draft head in native PyTorch: one drafted token per pass.

The head reads fused target features (the hidden states of a low, a middle and a high target
layer, `target_layer_ids`, concatenated then `fc`) and the embedding of the token at the same
position; one decoder layer, causal over the positions before it, gives a hidden state whose
logits (final norm, then the target's head restricted to a draft vocabulary) propose the next
token. Position j of the head takes `(g_{j-1}, x_j)`: g_{j-1} the fused target features of the
token before x_j, x_j's embedding; its output predicts x_{j+1}.

Drafting a round anchored at x_L (`drafters.autoregressive`): step 1 is position L with the target's
g_{L-1}; step k > 1 is position L + k - 1 with the chain token drafted by step k - 1 and, in place
of the target's features (which do not exist for drafts), the head's own output hidden state at
step k - 1 (EAGLE's feature re-use). Training-time test (`forward_train`) trains the head on
those own outputs: pass k's position j sees pass-1 keys at positions <= j - k + 1 and, for each
m in 2..k, the pass-m key at position j - k + m: exactly what step k of a round anchored at
j - k + 1 sees.

Checkpoint: `config.json` (`EagleConfig`) and `model.safetensors` (unprefixed keys, bfloat16 on
disk; loaded in the target's dtype). Embeddings and the LM head are the target's, never saved.

Shapes: B batch, T positions, H hidden size, L taps, V_d draft vocabulary.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

import torch
import torch.nn.functional as F
from torch import nn

from .checkpoint import check_state, load_module, target_parts, write_folder
from .layers import DrafterLayer, RMSNorm, apply_rope, rope_cos_sin, tapped_features

ARCHITECTURE = "LibraSpecEagleHead"


@dataclass
class EagleConfig:
    hidden_size: int  # the target's: embeddings and head are shared
    vocab_size: int  # the target's vocabulary
    num_target_layers: int
    target_layer_ids: list[int]  # low, middle, high (EAGLE-3)
    intermediate_size: int = 768
    num_attention_heads: int = 9
    num_key_value_heads: int = 3
    head_dim: int = 64
    rms_norm_eps: float = 1e-5
    rope_theta: float = 100_000.0
    draft_vocab_size: int = 0  # 0: the full target vocabulary
    feature_clip: float = 8.0  # |standardised feature| cap
    hidden_act: str = "silu"

    def __post_init__(self):
        self.target_layer_ids = [int(i) for i in self.target_layer_ids]
        for name in ("hidden_size", "vocab_size", "num_target_layers", "intermediate_size", "head_dim"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"eagle head {name} must be >= 1, got {getattr(self, name)!r}")
        if not self.target_layer_ids or any(not 0 <= i < self.num_target_layers for i in self.target_layer_ids):
            raise ValueError(
                f"eagle head taps {self.target_layer_ids} must be layers of a {self.num_target_layers}-layer target"
            )
        if not 0 <= self.draft_vocab_size <= self.vocab_size:
            raise ValueError(f"draft_vocab_size must lie in [0, {self.vocab_size}], got {self.draft_vocab_size}")

    def to_dict(self) -> dict:
        return {"architectures": [ARCHITECTURE], **asdict(self)}

    @classmethod
    def from_dict(cls, data: dict) -> "EagleConfig":
        if data.get("architectures") != [ARCHITECTURE]:
            raise ValueError(f"not an eagle head config (architectures {data.get('architectures')!r})")
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class EagleCache:
    """A sequence's committed context: per layer K/V of head positions 1..C-1, each (1, nkv, C-1, D),
    and the fused target features g_0..g_{C-1} (1, C, H) of the C committed tokens it holds."""

    keys: list[torch.Tensor] = field(default_factory=list)
    values: list[torch.Tensor] = field(default_factory=list)
    features: torch.Tensor | None = None

    @property
    def length(self) -> int:
        return 0 if self.features is None else self.features.shape[1]


class EagleHead(nn.Module):
    """fc on the taps, one causal decoder layer over [embedding ; features], norm, target head."""

    def __init__(self, config: EagleConfig, embed_tokens: nn.Embedding, lm_head: nn.Linear):
        super().__init__()
        c = config
        for name, weight in (("embeddings", embed_tokens.weight), ("lm_head", lm_head.weight)):
            if tuple(weight.shape) != (c.vocab_size, c.hidden_size):
                raise ValueError(
                    f"target {name} {tuple(weight.shape)} do not match the eagle head's "
                    f"(vocab_size {c.vocab_size}, hidden_size {c.hidden_size})"
                )
        self.config = c
        self.target_layer_ids = list(c.target_layer_ids)
        self.feature_dim = len(self.target_layer_ids) * c.hidden_size  # L * H
        self.__dict__["embed_tokens"], self.__dict__["lm_head"] = embed_tokens, lm_head  # shared, never saved
        self.fc = nn.Linear(self.feature_dim, c.hidden_size, bias=False)
        self.embed_norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.feature_norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.in_proj = nn.Linear(2 * c.hidden_size, c.hidden_size, bias=False)
        self.layer = DrafterLayer.of(c, bias=False)
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.log_temperature = nn.Parameter(torch.zeros(()))
        self.register_buffer("feature_mean", torch.zeros(self.feature_dim))
        self.register_buffer("feature_std", torch.ones(self.feature_dim))
        self.register_buffer("draft_vocab_ids", torch.arange(c.draft_vocab_size or c.vocab_size))

    # ---- pieces -------------------------------------------------------------------

    def target_features(self, hidden_states) -> torch.Tensor:
        """The tapped layers of a transformers `hidden_states` tuple, concatenated -> (B, T, L*H)."""
        return tapped_features(hidden_states, self.target_layer_ids, self.config.num_target_layers)

    def fuse(self, features: torch.Tensor) -> torch.Tensor:
        """(B, T, L*H) tapped features -> (B, T, H) g: standardised, clipped, then fc."""
        if features.dim() != 3 or features.shape[-1] != self.feature_dim:
            raise ValueError(f"features must be (B, T, {self.feature_dim}), got {tuple(features.shape)}")
        z = (features.float() - self.feature_mean.float()) / self.feature_std.float()
        z = z.clamp(-self.config.feature_clip, self.config.feature_clip)
        return self.fc(z.to(self.fc.weight.dtype))

    def inputs(self, ids: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        """Tokens (B, T) and the features before them (B, T, H) -> layer inputs (B, T, H)."""
        e = self.embed_tokens(ids).to(self.fc.weight.dtype)
        return self.in_proj(torch.cat([self.embed_norm(e), self.feature_norm(g.to(e.dtype))], dim=-1))

    def _attend(self, x, cos, sin, keys, values, mask):
        """The layer over states x (B, Q, H) whose keys/values are [keys ; own]: (out, own k, own v)."""
        layer, attn = self.layer, self.layer.self_attn
        h = layer.input_layernorm(x)
        b, q_len, _ = h.shape
        q = attn.q_norm(attn.q_proj(h).view(b, q_len, attn.heads, attn.head_dim)).transpose(1, 2)
        q = apply_rope(q, cos, sin)  # (B, nh, Q, D)
        k_own, v_own = attn.key_value(h, cos, sin)  # (B, nkv, Q, D)
        k = k_own if keys is None else torch.cat([keys, k_own], dim=2)
        v = v_own if values is None else torch.cat([values, v_own], dim=2)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=attn.heads != attn.kv_heads)
        x = x + attn.o_proj(out.transpose(1, 2).reshape(b, q_len, attn.heads * attn.head_dim))
        return x + layer.mlp(layer.post_attention_layernorm(x)), k_own, v_own

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        """Final norm, temperature, the target head's draft-vocabulary rows -> logits (.., V_d)."""
        weight = self.lm_head.weight.index_select(0, self.draft_vocab_ids)
        bias = None if self.lm_head.bias is None else self.lm_head.bias.index_select(0, self.draft_vocab_ids)
        h = self.norm(hidden).to(weight.dtype) / self.log_temperature.exp().to(weight.dtype)
        return F.linear(h, weight, bias)

    def _rope(self, positions: torch.Tensor):
        return rope_cos_sin(positions, self.config.head_dim, self.config.rope_theta)

    # ---- inference: the committed context and one step ----------------------------

    def new_cache(self) -> EagleCache:
        return EagleCache()

    def extend_context(self, cache: EagleCache, ids: torch.Tensor, features: torch.Tensor, first: int) -> None:
        """Append committed tokens ids (1, N) at positions first..first+N-1 (first == cache.length) with
        their tapped features (1, N, L*H): their g, and K/V for every head position they complete."""
        if first != cache.length:
            raise ValueError(f"the eagle cache holds {cache.length} tokens; cannot append at position {first}")
        g_new = self.fuse(features)  # (1, N, H)
        g_all = g_new if cache.features is None else torch.cat([cache.features, g_new], dim=1)
        start = max(first, 1)  # head position 0 has no features before it
        if start < g_all.shape[1]:
            positions = torch.arange(start, g_all.shape[1], device=g_all.device).view(1, -1)
            x = self.inputs(ids[:, start - first :], g_all[:, start - 1 : -1])  # (1, M, H)
            cos, sin = self._rope(positions)
            m, c = x.shape[1], cache.keys[0].shape[2] if cache.keys else 0
            causal = torch.ones(m, c + m, dtype=torch.bool, device=x.device).tril(c)
            keys = cache.keys[0] if cache.keys else None
            values = cache.values[0] if cache.values else None
            _, k, v = self._attend(x, cos, sin, keys, values, causal)
            cache.keys = [k if keys is None else torch.cat([keys, k], dim=2)]
            cache.values = [v if values is None else torch.cat([values, v], dim=2)]
        cache.features = g_all

    def crop(self, cache: EagleCache, length: int) -> None:
        """Keep the first `length` committed tokens (the head's only rollback)."""
        if not 0 <= length <= cache.length:
            raise ValueError(f"cannot crop an eagle cache of {cache.length} tokens to {length}")
        cache.features = cache.features[:, :length] if length else None
        kept = max(length - 1, 0)
        cache.keys = [k[:, :, :kept] for k in cache.keys] if kept else []
        cache.values = [v[:, :, :kept] for v in cache.values] if kept else []

    def step(self, cache: EagleCache, token: int, g: torch.Tensor, position: int, round_kv: list) -> tuple:
        """One drafting pass: `token` at `position` after the context and this round's earlier steps
        (`round_kv`, [(k, v)] appended to here) with the features g (1, 1, H) before it ->
        (logits (V_d,), the output hidden (1, 1, H): the next step's g)."""
        device = self.fc.weight.device
        ids = torch.tensor([[int(token)]], device=device)
        x = self.inputs(ids, g)  # (1, 1, H)
        cos, sin = self._rope(torch.tensor([[int(position)]], device=device))
        parts_k = cache.keys + [k for k, _ in round_kv]
        parts_v = cache.values + [v for _, v in round_kv]
        keys = torch.cat(parts_k, dim=2) if parts_k else None
        values = torch.cat(parts_v, dim=2) if parts_v else None
        hidden, k, v = self._attend(x, cos, sin, keys, values, None)  # one query: sees everything before it
        round_kv.append((k, v))
        return self.head(hidden)[0, 0], hidden

    # ---- training: the training-time test -----------------------------------------

    def forward_train(self, ids: torch.Tensor, features: torch.Tensor, positions: torch.Tensor, passes: int) -> list:
        """Logits of `passes` unrolled drafting steps at every position -> [(B, T, V_d)] * passes.

        ids (B, T) are x_0..x_{T-1} of a window, features (B, T, L*H) their tapped target features,
        positions (B, T) their positions. Pass k's output at window index j predicts x_{j+1} given the
        target's features up to g_{j-k} and the head's own hidden states for the k - 1 steps after.
        Index 0 has no feature before it: its outputs (every pass) carry no label, and no later
        position attends to its pass-1 key (a drafting context starts at position 1).
        """
        b, t = ids.shape
        g = self.fuse(features)  # (B, T, H)
        g_before = torch.cat([torch.zeros_like(g[:, :1]), g[:, :-1]], dim=1)  # g_{j-1}
        cos, sin = self._rope(positions)
        j = torch.arange(t, device=ids.device)
        # pass-1 keys: key index <= query index, never index 0 (no features before it: drafting's
        # context starts at position 1), except index 0 itself, so that its unscored row sees a key
        causal = (j[None, :] <= j[:, None]) & ((j[None, :] >= 1) | (j[:, None] == 0))  # (T, T)
        outs, keys, values, hidden = [], [], [], None
        for k in range(1, passes + 1):
            feed = g_before if k == 1 else torch.cat([torch.zeros_like(hidden[:, :1]), hidden[:, :-1]], dim=1)
            x = self.inputs(ids, feed)
            first = causal if k == 1 else (j[None, :] <= j[:, None] - (k - 1)) & (j[None, :] >= 1)  # <= j - k + 1
            blocks = [first] + [j[None, :] == j[:, None] - (k - m) for m in range(2, k + 1)]
            mask = torch.cat(blocks, dim=1)[None, None]  # (1, 1, T, k*T)
            kk = torch.cat(keys, dim=2) if keys else None
            vv = torch.cat(values, dim=2) if values else None
            hidden, k_own, v_own = self._attend(x, cos, sin, kk, vv, mask)
            keys.append(k_own)
            values.append(v_own)
            outs.append(self.head(hidden))
        return outs

    # ---- vocabulary ---------------------------------------------------------------

    def to_target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return self.draft_vocab_ids[draft_ids]

    def to_full_vocab(self, probs: torch.Tensor) -> torch.Tensor:
        """(.., V_d) -> (.., V), zero outside the draft vocabulary."""
        full = probs.new_zeros(*probs.shape[:-1], self.config.vocab_size)
        return full.index_copy_(-1, self.draft_vocab_ids.to(probs.device), probs)

    @torch.no_grad()
    def set_draft_vocab(self, ids) -> None:
        ids = torch.as_tensor(ids, dtype=torch.long).flatten()
        if ids.numel() != self.draft_vocab_ids.numel() or ids.unique().numel() != ids.numel():
            raise ValueError(
                f"the draft vocabulary needs {self.draft_vocab_ids.numel()} distinct ids, got {ids.numel()}"
            )
        if int(ids.min()) < 0 or int(ids.max()) >= self.config.vocab_size:
            raise ValueError(f"draft vocabulary ids must lie in [0, {self.config.vocab_size})")
        self.draft_vocab_ids.copy_(ids)

    @torch.no_grad()
    def set_feature_stats(self, mean: torch.Tensor, std: torch.Tensor, min_std: float = 1e-4) -> None:
        if tuple(mean.shape) != (self.feature_dim,) or tuple(std.shape) != (self.feature_dim,):
            raise ValueError(f"feature mean/std must have shape ({self.feature_dim},)")
        self.feature_mean.copy_(mean)
        self.feature_std.copy_(std.clamp(min=min_std))

    @torch.no_grad()
    def init_from_target(self, target_model, layer_id: int) -> None:
        """Attention of target layer `layer_id` and the final norm where shapes match; o_proj and
        down_proj zeroed so the layer starts as the identity."""
        model, _, _ = target_parts(target_model)
        decoder = model.get_decoder()
        src = decoder.layers[layer_id].state_dict()
        for name, p in self.layer.state_dict().items():
            if name in src and src[name].shape == p.shape:
                p.copy_(src[name])
        self.layer.self_attn.o_proj.weight.zero_()
        self.layer.mlp.down_proj.weight.zero_()
        if getattr(decoder, "norm", None) is not None and decoder.norm.weight.shape == self.norm.weight.shape:
            self.norm.weight.copy_(decoder.norm.weight)

    # ---- checkpoints --------------------------------------------------------------

    def save_pretrained(self, path) -> None:
        """config.json + model.safetensors (bfloat16 weights, float32 buffers), atomically."""
        buffers = {name for name, _ in self.named_buffers()}
        state = {}
        for k, v in self.state_dict().items():
            v = v.detach().cpu()
            if v.is_floating_point():
                v = v.float() if k in buffers else v.to(torch.bfloat16)  # weights halved on disk
            state[k] = v.contiguous()
        write_folder(path, self.config.to_dict(), state)

    def load_checkpoint_state(self, state: dict[str, torch.Tensor]) -> None:
        own = self.state_dict()
        check_state(own, state, "eagle head")
        self.load_state_dict({k: v.to(own[k].dtype) for k, v in state.items()})

    @classmethod
    def from_pretrained(cls, path, target_model) -> "EagleHead":
        """Load a head folder and bind it to the target's embeddings and head."""
        return load_module(cls, EagleConfig, path, target_model, "eagle head")
