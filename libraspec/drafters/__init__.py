"""Drafters behind one interface (`base.Drafter`), and the registry of their names."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Sequence

from ..cost import Drafting
from .base import DraftBuffer, Drafter
from .block import BlockDiffusionDrafter
from .hybrid import HybridDrafter
from .lookup import LookupCalibration, LookupCalibrationError, LookupDrafter, load_corpus

DRAFTERS = ("dflash", "lookup", "hybrid")
DRAFTER_TITLES = {  # what the app's drafter choices say
    "dflash": "block diffusion (dflash)",
    "lookup": "look-up in the text so far (lookup)",
    "hybrid": "hybrid: per round the more promising of both",
}
SOURCE_TITLES = {"dflash": "block diffusion", "lookup": "look-up"}  # RoundRecord.draft_sources, in words
SOURCE_COLOURS = {"dflash": "#56B4E9", "lookup": "#E69F00"}  # how views tint a source's drafts (Okabe-Ito)


def make_drafter(name: str, pair) -> Drafter:
    """The named drafter over a model pair (its block-diffusion module, its target); every drafter
    of a pair drafts n = pair.n tokens per step."""
    if name == "dflash":
        return BlockDiffusionDrafter(pair.drafter, pair.target)
    if name == "lookup":
        return _lookup(pair)
    if name == "hybrid":
        return HybridDrafter(BlockDiffusionDrafter(pair.drafter, pair.target), _lookup(pair))
    raise ValueError(f"unknown drafter {name!r}; choose one of {', '.join(DRAFTERS)}")


def round_drafting(name: str, kept: Sequence[str] = ()) -> Drafting:
    """How a round of the named drafter drafts, to price it at any d (theory, the step-through):
    its class's `drafting`, given the source the round kept at each step (`kept`, a recorded
    round's, which a hybrid round's mix depends on)."""
    if name not in DRAFTERS:
        raise ValueError(f"unknown drafter {name!r}; choose one of {', '.join(DRAFTERS)}")
    classes = {c.name: c for c in (BlockDiffusionDrafter, LookupDrafter, HybridDrafter)}
    return classes[name].drafting(kept)


def _lookup(pair) -> LookupDrafter:
    corpus = None
    if pair.lookup_corpus is not None:
        path = Path(pair.lookup_corpus)
        corpus = _corpus(str(path), path.stat().st_mtime if path.exists() else 0.0, pair.target.vocab_size)
    return LookupDrafter(pair.n, pair.target.vocab_size, corpus=corpus)


@functools.lru_cache(maxsize=4)
def _corpus(path: str, mtime: float, vocab_size: int):
    """The corpus index, read once per file version (it is never written after loading)."""
    return load_corpus(path, vocab_size)


def drafter_with_fallback(name: str, pair) -> tuple[Drafter, str | None]:
    """`make_drafter`, except that a look-up drafter whose calibration file is missing or damaged
    falls back to the block-diffusion drafter; the second value then says what happened."""
    try:
        return make_drafter(name, pair), None
    except LookupCalibrationError as err:
        return make_drafter("dflash", pair), f"{err}. Using the block-diffusion drafter (dflash) instead."


__all__ = [
    "DRAFTERS",
    "DraftBuffer",
    "Drafter",
    "LookupCalibration",
    "SOURCE_COLOURS",
    "SOURCE_TITLES",
    "drafter_with_fallback",
    "make_drafter",
    "round_drafting",
]
