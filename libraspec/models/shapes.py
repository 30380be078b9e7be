"""The real pairs' shapes with random weights: GPU timing and code-path checks without downloads.

A forward's time depends on the shapes, the dtype and the kernels, not on the weights' values, so
a Qwen3 target and a DFlash drafter built from the published configs' numbers and random weights
time like the real ones (they do not draft like them: their acceptance is meaningless). The
numbers below are facts from the public configs (Qwen/Qwen3-4B, Qwen/Qwen3-8B; z-lab's DFlash b16
drafters: block_size 16, 5 layers with the target's widths, mask token 151669). The drafters'
tapped layers follow DFlash's rule (`default_target_layer_ids`), which reproduces the published
32B drafter's taps; which layers are tapped does not change the time, only how many.

`random_pair` builds a pair in memory on a device; `write_zlab_folders` writes a target folder
(`save_pretrained`, with a byte-level tokenizer and a Qwen3-style chat template) and a drafter
folder in z-lab's layout, which `registry.hub_pair` loads through the code a GPU Space runs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..device import ATTENTION
from .dflash import DFlashConfig, DFlashDrafter
from .dflash_config import default_target_layer_ids
from .registry import TINY_WIDTHS, ByteTokenizer, ModelPair

QWEN3_TEMPLATE = (
    "{%- for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{ '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}{%- endif %}"
)


@dataclass(frozen=True)
class Shape:
    """A target's config numbers and its DFlash drafter's."""

    name: str
    target: dict  # Qwen3Config keywords
    drafter_layers: int = 5
    block_size: int = 16  # anchor + n masks
    taps: int = 5  # target layers the drafter reads
    mask_token_id: int = 151669
    notes: dict = field(default_factory=dict)

    @property
    def n(self) -> int:
        return self.block_size - 1


_QWEN3 = dict(
    num_hidden_layers=36,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=128,
    vocab_size=151936,
    rope_theta=1_000_000.0,
    rms_norm_eps=1e-6,
    max_position_embeddings=40960,
)
SHAPES = {
    "qwen3-4b": Shape("qwen3-4b", dict(_QWEN3, hidden_size=2560, intermediate_size=9728, tie_word_embeddings=True)),
    "qwen3-8b": Shape("qwen3-8b", dict(_QWEN3, hidden_size=4096, intermediate_size=12288, tie_word_embeddings=False)),
    # the dry run's stand-in: the same code path on tiny widths (CPU, seconds)
    "tiny": Shape(
        "tiny",
        dict(
            _QWEN3,
            **TINY_WIDTHS,
            num_hidden_layers=6,
            head_dim=16,
            vocab_size=512,
            max_position_embeddings=4096,
        ),
        drafter_layers=2,
        taps=2,
        mask_token_id=300,
    ),
}


def target_config(shape: Shape):
    from transformers import Qwen3Config

    return Qwen3Config(bos_token_id=0, eos_token_id=1, pad_token_id=0, **shape.target)


def drafter_config(shape: Shape) -> dict:
    """The drafter's config.json in z-lab's DFlash b16 layout."""
    t = shape.target
    return {
        "architectures": ["DFlashDraftModel"],
        "auto_map": {"AutoModel": "dflash.DFlashDraftModel"},
        "attention_bias": False,
        "attention_dropout": 0.0,
        "block_size": shape.block_size,
        "dflash_config": {
            "mask_token_id": shape.mask_token_id,
            "target_layer_ids": default_target_layer_ids(t["num_hidden_layers"], shape.taps),
        },
        "dtype": "bfloat16",
        "head_dim": t["head_dim"],
        "hidden_act": "silu",
        "hidden_size": t["hidden_size"],
        "intermediate_size": t["intermediate_size"],
        "layer_types": ["full_attention"] * shape.drafter_layers,
        "max_position_embeddings": t["max_position_embeddings"],
        "model_type": "qwen3",
        "num_attention_heads": t["num_attention_heads"],
        "num_hidden_layers": shape.drafter_layers,
        "num_key_value_heads": t["num_key_value_heads"],
        "num_target_layers": t["num_hidden_layers"],
        "rms_norm_eps": t["rms_norm_eps"],
        "rope_theta": t["rope_theta"],
        "tie_word_embeddings": False,
        "vocab_size": t["vocab_size"],
    }


@torch.inference_mode()
def random_models(shape: Shape, device, dtype: torch.dtype, seed: int = 0):
    """(target model, DFlash drafter) with random weights, created on `device` in `dtype`."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(target_config(shape), dtype=dtype, attn_implementation=ATTENTION)
        model.eval()
        config = DFlashConfig.from_dict(drafter_config(shape))
        drafter = DFlashDrafter(config, model.get_input_embeddings(), model.get_output_embeddings())
    return model, drafter.to(device=device, dtype=dtype).eval()


def random_pair(shape: Shape, device, dtype: torch.dtype, seed: int = 0):
    """A `ModelPair` of random models in `shape` (tokenizer: bytes; only for timing and checks)."""
    from .target import TargetModel

    model, drafter = random_models(shape, device, dtype, seed)
    return ModelPair(
        f"{shape.name}-random",
        f"{shape.name}-shaped random pair",
        TargetModel(model),
        drafter,
        ByteTokenizer(),
        drafter_id=f"random:{shape.name}:{seed}",
    )


def byte_level_tokenizer():
    """Byte-level BPE without merges (every UTF-8 string round-trips) plus Qwen3's chat tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    tok.add_tokens(["<think>", "</think>"])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", chat_template=QWEN3_TEMPLATE
    )


@torch.inference_mode()
def write_zlab_folders(
    shape: Shape, root: Path, device="cpu", dtype=torch.bfloat16, seed: int = 0
) -> tuple[Path, Path]:
    """A target folder (Hugging Face layout) and a drafter folder (z-lab's DFlash layout) of random
    weights in `shape`, under `root`; returns (target folder, drafter folder)."""
    from safetensors.torch import save_file
    from transformers import GenerationConfig

    root = Path(root)
    target_dir, drafter_dir = root / f"{shape.name}-target", root / f"{shape.name}-dflash-b16"
    model, drafter = random_models(shape, device, dtype, seed)
    tokenizer = byte_level_tokenizer()
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    model.generation_config = GenerationConfig(eos_token_id=[im_end], pad_token_id=0)
    model.save_pretrained(target_dir)
    tokenizer.save_pretrained(target_dir)
    drafter_dir.mkdir(parents=True, exist_ok=True)
    (drafter_dir / "config.json").write_text(json.dumps(drafter_config(shape), indent=1))
    state = {k: v.to(torch.bfloat16).contiguous().cpu() for k, v in drafter.state_dict().items()}
    save_file(state, str(drafter_dir / "model.safetensors"), metadata={"format": "pt"})
    (drafter_dir / "dflash.py").write_text("raise RuntimeError('remote code must never run')\n")
    del model, drafter
    return target_dir, drafter_dir
