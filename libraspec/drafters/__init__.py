"""Drafters behind one interface (`base.Drafter`), and the registry of their names."""
from __future__ import annotations

from .base import DraftBuffer, Drafter
from .block import BlockDiffusionDrafter

DRAFTERS = ("dflash",)


def make_drafter(name: str, pair) -> Drafter:
    """The named drafter over a model pair (its block-diffusion module, its target)."""
    if name == "dflash":
        return BlockDiffusionDrafter(pair.drafter, pair.target)
    raise ValueError(f"unknown drafter {name!r}; choose one of {', '.join(DRAFTERS)}")


__all__ = ["DRAFTERS", "DraftBuffer", "Drafter", "make_drafter"]
