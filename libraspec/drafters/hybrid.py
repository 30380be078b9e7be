"""Hybrid drafting: look-up where the text repeats itself, block diffusion elsewhere.

Each round drafts one step with both drafters and keeps the source whose first step promises
more accepted tokens, E = sum_j prod_{k<=j} q_k (the expected accepted length of a chain with
acceptance probabilities q_k). Both sources' q come from their distributions (the block drafter's
is each position's peak), never from a sampled token, so the choice keeps sampling lossless.
Later steps come from the kept source; a look-up run that finds nothing more is continued by
block-diffusion passes conditioned on the chain so far. A
proposal not kept is part of its step's time and is priced as a step of its drafter
(`discarded`, which the kept sources alone determine). Every token records its source.
"""

from __future__ import annotations

from typing import Sequence

from ..cost import DIFFUSION, LOOKUP, Drafting
from ..policy import expected_accepted
from .base import DraftBuffer
from .block import BlockDiffusionDrafter, BlockDraft
from .lookup import LookupDraft, LookupDrafter


def discarded(kept: Sequence[str]) -> list[tuple[int, str]]:
    """The proposals a hybrid round made and did not keep, (step, source), from the source kept at
    each step: the first step runs both drafters, and a look-up that finds nothing more runs
    before the block-diffusion step that continues it."""
    if not kept:
        return []
    first = [(0, LOOKUP if kept[0] == DIFFUSION else DIFFUSION)]
    return first + [(b, LOOKUP) for b in range(1, len(kept)) if kept[b - 1] == LOOKUP and kept[b] == DIFFUSION]


class HybridDraft(DraftBuffer):
    def __init__(self, block: BlockDraft, lookup: LookupDraft):
        super().__init__(block.n, block.vocab_size, block.sampling)
        self.block, self.lookup = block, lookup
        self.source: str | None = None  # the source kept after the first step

    def _step(self):  # `extend` times the whole step, proposals not kept included
        if self.source is None:
            look, block = self.lookup.propose(self.tokens), self.block.propose(self.tokens)
            use_lookup = not self.lookup.empty and expected_accepted(look[1]) > expected_accepted(block[1])
            self.source = LOOKUP if use_lookup else DIFFUSION
            return look if use_lookup else block
        if self.source == LOOKUP:
            look = self.lookup.propose(self.tokens)
            if look[1][0] > 0.0:  # the look-up found something to say
                return look
            self.source = DIFFUSION  # `discarded` counts the look-up that found nothing
        return self.block.propose(self.tokens)

    @property
    def discarded(self) -> list[tuple[int, str]]:
        return discarded(self.step_sources)


class HybridDrafter:
    """Look-up and block-diffusion drafting, chosen per round by expected accepted length."""

    name = "hybrid"
    needs_features = True

    @classmethod
    def drafting(cls, kept: Sequence[str] = (), n: int | None = None) -> Drafting:
        """A hybrid round that kept these sources: its steps, the proposals it did not keep and the
        block drafter's upkeep; with none known, one that kept block diffusion from its first step."""
        kept = tuple(kept) or (DIFFUSION,)
        return Drafting(kept, tuple(discarded(kept)), needs_features=cls.needs_features)

    def __init__(self, block: BlockDiffusionDrafter, lookup: LookupDrafter):
        if block.n != lookup.n:
            raise ValueError(f"hybrid drafters need one n, got {block.n} (block) and {lookup.n} (look-up)")
        self.block, self.lookup, self.n = block, lookup, block.n

    def new_context(self):
        return self.block.new_context(), self.lookup.new_context()

    def context_length(self, context) -> int:
        return self.block.context_length(context[0])

    def fit_context(self, context, ids, hidden_states, first_position) -> None:
        self.block.fit_context(context[0], ids, hidden_states, first_position)
        self.lookup.fit_context(context[1], ids, None, first_position)

    def start_round(self, context, ids, sampling) -> HybridDraft:
        return HybridDraft(
            self.block.start_round(context[0], ids, sampling), self.lookup.start_round(context[1], ids, sampling)
        )
