"""A drafter module's checkpoint folder: `config.json` + `model.safetensors` (unprefixed keys, no
embeddings or head: those are the target's). Shared by the DFlash drafter and the EAGLE-style head;
`what` names the module in every message ("drafter", "eagle head")."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

CONFIG_FILE, WEIGHTS_FILE = "config.json", "model.safetensors"


def target_parts(target_model) -> tuple[nn.Module, nn.Embedding, nn.Linear]:
    """(causal LM, embed_tokens, lm_head) of a transformers model or a wrapper holding one in `.model`."""
    model = target_model if hasattr(target_model, "get_input_embeddings") else target_model.model
    return model, model.get_input_embeddings(), model.get_output_embeddings()


def write_folder(path, config: dict, state: dict[str, torch.Tensor]) -> None:
    """Write config.json + model.safetensors into `path` atomically (a temporary folder, then renames)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    os.chmod(tmp, 0o755)  # mkdtemp makes it private; the renamed checkpoint should not be
    try:
        (tmp / CONFIG_FILE).write_text(json.dumps(config, indent=2, sort_keys=True))
        save_file(state, str(tmp / WEIGHTS_FILE), metadata={"format": "pt"})
        os.chmod(tmp / WEIGHTS_FILE, 0o644)
        if path.exists():
            for name in (CONFIG_FILE, WEIGHTS_FILE):
                os.replace(tmp / name, path / name)
        else:
            os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def read_folder(path, what: str) -> tuple[dict, dict[str, torch.Tensor]]:
    """(config dict, state) of a checkpoint folder; FileNotFoundError naming the missing file."""
    path = Path(path)
    for name in (CONFIG_FILE, WEIGHTS_FILE):
        if not (path / name).is_file():
            raise FileNotFoundError(f"{what} checkpoint {path} has no {name}")
    return json.loads((path / CONFIG_FILE).read_text()), load_file(str(path / WEIGHTS_FILE))


def check_state(own: dict, state: dict, what: str) -> None:
    """A missing, unexpected or mis-shaped key raises ValueError."""
    missing, unexpected = sorted(set(own) - set(state)), sorted(set(state) - set(own))
    if missing:
        raise ValueError(f"{what} checkpoint is missing keys {missing[:8]}")
    if unexpected:
        raise ValueError(f"{what} checkpoint has unexpected keys {unexpected[:8]}")
    for key, value in state.items():
        if tuple(value.shape) != tuple(own[key].shape):
            raise ValueError(
                f"{what} checkpoint key {key!r} has shape {tuple(value.shape)}, expected {tuple(own[key].shape)}"
            )


def check_target(config, target_model, what: str) -> tuple[nn.Embedding, nn.Linear]:
    """The target's embeddings and head, once its hidden size, vocabulary and depth match `config`'s."""
    model, embed, head = target_parts(target_model)
    tc = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    for key, theirs in (
        ("hidden_size", tc.hidden_size),
        ("vocab_size", embed.weight.shape[0]),
        ("num_target_layers", tc.num_hidden_layers),
    ):
        if getattr(config, key) != int(theirs):
            raise ValueError(f"{what} {key} {getattr(config, key)} does not match the target's {int(theirs)}")
    return embed, head


def load_module(cls, config_cls, path, target_model, what: str):
    """A module of class `cls` from a checkpoint folder (its config read by `config_cls.from_dict`),
    bound to the target's embeddings and head, in their device and dtype, in eval mode."""
    data, state = read_folder(path, what)
    config = config_cls.from_dict(data)
    embed, head = check_target(config, target_model, what)
    module = cls(config, embed, head)
    module.load_checkpoint_state(state)
    return module.to(device=embed.weight.device, dtype=embed.weight.dtype).eval()
