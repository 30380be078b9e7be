"""Drafters behind one interface (`base.Drafter`), and the registry of their names."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Sequence

from ..cost import Drafting
from .autoregressive import EagleDrafter
from .base import DraftBuffer, Drafter
from .block import BlockDiffusionDrafter
from .hybrid import HybridDrafter
from .iterative import IterativeBlockDrafter
from .lookup import LookupCalibration, LookupCalibrationError, LookupDrafter, load_corpus

DRAFTERS = ("dflash", "fastdllm", "eagle", "lookup", "hybrid")
DRAFTER_TITLES = {  # what the app's drafter choices say
    "dflash": "block diffusion (dflash)",
    "fastdllm": "block diffusion, iterative unmasking (fastdllm)",
    "eagle": "autoregressive head, a token a pass (eagle)",
    "lookup": "look-up in the text so far (lookup)",
    "hybrid": "hybrid: per round the more promising of both",
}
SOURCE_TITLES = {"dflash": "block diffusion", "lookup": "look-up", "eagle": "autoregressive head"}  # in words
SOURCE_COLOURS = {"dflash": "#56B4E9", "lookup": "#E69F00", "eagle": "#009E73"}  # a source's drafts' tint (Okabe-Ito)


def make_drafter(name: str, pair) -> Drafter:
    """The named drafter over a model pair (its block-diffusion module, its target, its EAGLE-style
    head); the block drafters and look-up draft n = pair.n tokens per step, the head one."""
    if name == "dflash":
        return BlockDiffusionDrafter(pair.drafter, pair.target)
    if name == "fastdllm":
        return IterativeBlockDrafter(pair.drafter, pair.target)
    if name == "eagle":
        return EagleDrafter(getattr(pair, "eagle", None), pair.target)
    if name == "lookup":
        return _lookup(pair)
    if name == "hybrid":
        return HybridDrafter(BlockDiffusionDrafter(pair.drafter, pair.target), _lookup(pair))
    raise ValueError(f"unknown drafter {name!r}; choose one of {', '.join(DRAFTERS)}")


def round_drafting(name: str, kept: Sequence[str] = (), n: int | None = None) -> Drafting:
    """How a round of the named drafter drafts, to price it at any d (theory, the step-through):
    its class's `drafting`, given the source the round kept at each step (`kept`, a recorded
    round's, which a hybrid round's mix depends on) and the drafts per step n (an iterative
    round is priced at its most passes)."""
    if name not in DRAFTERS:
        raise ValueError(f"unknown drafter {name!r}; choose one of {', '.join(DRAFTERS)}")
    classes = (BlockDiffusionDrafter, IterativeBlockDrafter, EagleDrafter, LookupDrafter, HybridDrafter)
    return {c.name: c for c in classes}[name].drafting(kept, n)


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
