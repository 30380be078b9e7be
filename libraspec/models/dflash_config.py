"""Configuration of the DFlash drafter: DFlash's `config.json` layout plus project extensions.

DFlash keys: the usual Qwen3 ones (hidden_size, intermediate_size, num_attention_heads,
num_key_value_heads, head_dim, rms_norm_eps, rope_theta, vocab_size, ...), `block_size`
(anchor + masks, so n = block_size - 1 drafts per pass), `num_target_layers`,
`num_hidden_layers` (drafter layers) and `dflash_config.{target_layer_ids,
mask_token_id}`. Project extensions live under `libraspec_config` and are written only
when one is on, so a plain drafter's config stays a DFlash config. Keys this module does
not use are kept in `extra` and written back on save.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

EXTENSIONS = ("slot_embeddings", "learned_temperature", "feature_stats", "feature_clip", "draft_vocab_size")


def default_target_layer_ids(num_target_layers: int, count: int) -> list[int]:
    """Tapped target layers when a config names none (DFlash's rule).

    One tap: the middle layer. Several: evenly spread over layers 1 .. L-3 (skipping
    the embedding-like first layer and the last layers, whose output is normed for the
    head); a target too shallow for that spreads over 0 .. L-1 instead.
    """
    if count < 1 or count > num_target_layers:
        raise ValueError(f"cannot tap {count} layers of a {num_target_layers}-layer target")
    if count == 1:
        return [num_target_layers // 2]
    start, end = (1, num_target_layers - 3) if num_target_layers - 4 >= count - 1 else (0, num_target_layers - 1)
    return [round(start + i * (end - start) / (count - 1)) for i in range(count)]


@dataclass
class DFlashConfig:
    hidden_size: int  # must equal the target's: embeddings and head are shared
    intermediate_size: int
    num_hidden_layers: int  # drafter layers (DFlash b16 checkpoints: 5)
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int  # the target's vocabulary
    num_target_layers: int  # target depth; taps index its hidden_states tuple
    target_layer_ids: list[int]
    mask_token_id: int  # id of MASK; should be a token the target never emits
    block_size: int = 16  # anchor + 15 masks: n = 15 drafts per pass
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    max_position_embeddings: int = 40960
    attention_bias: bool = False
    hidden_act: str = "silu"
    slot_embeddings: bool = False
    learned_temperature: bool = False
    feature_stats: bool = False
    feature_clip: float = 8.0  # |standardised feature| cap when feature_stats is on
    draft_vocab_size: int = 0  # 0: full target vocabulary
    extra: dict = field(default_factory=dict)  # other config.json keys, kept on save

    def __post_init__(self):
        for name in (
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "vocab_size",
            "num_target_layers",
        ):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.block_size < 2:
            raise ValueError(f"block_size must be >= 2 (anchor + at least one mask), got {self.block_size}")
        self.target_layer_ids = [int(i) for i in self.target_layer_ids]
        if not self.target_layer_ids or not all(0 <= i < self.num_target_layers for i in self.target_layer_ids):
            raise ValueError(
                f"target_layer_ids {self.target_layer_ids} must be non-empty and within [0, {self.num_target_layers})"
            )
        if not 0 <= self.mask_token_id < self.vocab_size:
            raise ValueError(f"mask_token_id {self.mask_token_id} is outside the vocabulary ({self.vocab_size})")
        if not 0 <= self.draft_vocab_size <= self.vocab_size:
            raise ValueError(f"draft_vocab_size {self.draft_vocab_size} must be in [0, {self.vocab_size}]")
        if self.feature_clip <= 0:
            raise ValueError(f"feature_clip must be positive, got {self.feature_clip}")

    @classmethod
    def from_dict(cls, d: dict) -> "DFlashConfig":
        """Parse a DFlash `config.json` dict (plus an optional `libraspec_config`)."""
        d = dict(d)
        dflash = dict(d.get("dflash_config") or {})
        lib = dict(d.pop("libraspec_config", None) or {})
        unknown = set(lib) - set(EXTENSIONS)
        if unknown:
            raise ValueError(f"unknown libraspec_config keys {sorted(unknown)}; known: {list(EXTENSIONS)}")
        for key in (
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "vocab_size",
            "num_target_layers",
            "block_size",
        ):
            if key not in d:
                raise ValueError(f"drafter config lacks required key {key!r}")
        if dflash.get("mask_token_id") is None:
            raise ValueError("drafter config lacks dflash_config.mask_token_id")
        rope = d.pop("rope_parameters", None) or {}
        scaling = d.pop("rope_scaling", None) or {}
        rope_type = scaling.get("rope_type", scaling.get("type", rope.get("rope_type", "default")))
        if rope_type != "default":
            raise ValueError(f"rope type {rope_type!r} is not supported (only plain RoPE)")
        own = {f.name for f in fields(cls)} - {"extra", "target_layer_ids", "mask_token_id"}
        kwargs = {k: d.pop(k) for k in list(d) if k in own}
        kwargs["rope_theta"] = float(kwargs.get("rope_theta") or rope.get("rope_theta", 1_000_000.0))
        kwargs.setdefault("num_key_value_heads", kwargs["num_attention_heads"])
        kwargs.setdefault("head_dim", kwargs["hidden_size"] // kwargs["num_attention_heads"])
        ids = dflash.get("target_layer_ids")
        if ids is None:
            ids = default_target_layer_ids(int(kwargs["num_target_layers"]), int(kwargs["num_hidden_layers"]))
        kwargs.update(lib)
        return cls(**kwargs, target_layer_ids=ids, mask_token_id=int(dflash["mask_token_id"]), extra=d)

    def to_dict(self) -> dict:
        """The DFlash `config.json` layout; extensions go under `libraspec_config` only when on."""
        out = dict(self.extra)
        out.setdefault("architectures", ["DFlashDraftModel"])
        out.setdefault("model_type", "qwen3")
        mine = asdict(self)
        for key in ("extra", "target_layer_ids", "mask_token_id", *EXTENSIONS):
            mine.pop(key)
        out.update(mine, rope_scaling=None)
        out["dflash_config"] = {
            **dict(out.get("dflash_config") or {}),
            "target_layer_ids": list(self.target_layer_ids),
            "mask_token_id": self.mask_token_id,
        }
        lib = {k: getattr(self, k) for k in EXTENSIONS}
        if self.slot_embeddings or self.learned_temperature or self.feature_stats or self.draft_vocab_size:
            out["libraspec_config"] = lib
        return out

    @classmethod
    def from_target_config(
        cls,
        target_config,
        *,
        block_size: int = 16,
        num_hidden_layers: int = 1,
        target_layer_ids: list[int] | None = None,
        mask_token_id: int | None = None,
        **extensions,
    ) -> "DFlashConfig":
        """A drafter shaped like the target's layers (so `init_from_target` can copy them).

        mask_token_id defaults to vocab_size - 1; pass a token the target never emits
        when the tokenizer has one. Taps default to `default_target_layer_ids(L,
        num_hidden_layers)` as in DFlash.
        """
        bad = set(extensions) - set(EXTENSIONS)
        if bad:
            raise ValueError(f"unknown drafter extensions {sorted(bad)}; known: {list(EXTENSIONS)}")
        tc = target_config.get_text_config() if hasattr(target_config, "get_text_config") else target_config
        heads = int(tc.num_attention_heads)
        rope = getattr(tc, "rope_parameters", None) or {}
        theta = getattr(tc, "rope_theta", None) or rope.get("rope_theta", 10_000.0)
        layers = int(tc.num_hidden_layers)
        return cls(
            hidden_size=int(tc.hidden_size),
            intermediate_size=int(tc.intermediate_size),
            num_hidden_layers=num_hidden_layers,
            num_attention_heads=heads,
            num_key_value_heads=int(getattr(tc, "num_key_value_heads", None) or heads),
            head_dim=int(getattr(tc, "head_dim", None) or tc.hidden_size // heads),
            vocab_size=int(tc.vocab_size),
            num_target_layers=layers,
            target_layer_ids=list(target_layer_ids or default_target_layer_ids(layers, num_hidden_layers)),
            mask_token_id=int(tc.vocab_size - 1 if mask_token_id is None else mask_token_id),
            block_size=block_size,
            rms_norm_eps=float(getattr(tc, "rms_norm_eps", 1e-6)),
            rope_theta=float(theta),
            max_position_embeddings=int(getattr(tc, "max_position_embeddings", 40960)),
            hidden_act=str(getattr(tc, "hidden_act", "silu")),
            **extensions,
        )
