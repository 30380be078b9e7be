"""The drafter interface: what the engine needs from any source of draft tokens.

A `Drafter` keeps a per-sequence context (kept equal to the committed tokens minus the newest,
see `fit_context`) and, each round, opens a `DraftBuffer` that drafts on demand, n tokens per
step. Policies read the buffer's confidences q_i and ask it for more steps; the engine reads
tokens, their proposal distributions (for lossless sampling), the source of every token and
the time every step took (docs/ARCHITECTURE.md, "The drafter interface").

A buffer holds no sampled value: its `tokens` are the drafter's chain (each position's most
likely token, or a look-up's deterministic continuation), later steps are conditioned on that
chain, and q_i is the chain token's probability. When sampling, the engine draws the drafts it
verifies from the stored proposal distributions only after the length is chosen (`draw`), so
neither the length nor a proposal can depend on a draft's own sampled value
(docs/ARCHITECTURE.md, "Lossless verification").
"""

from __future__ import annotations

import time
from typing import Protocol, Sequence

import numpy as np
import torch

from ..cost import Drafting
from ..verify import SamplingConfig


class Stopwatch:
    """Seconds accumulated between `start()` and `stop()` calls (a policy's, while it decides)."""

    def __init__(self):
        self.seconds = 0.0
        self._since: float | None = None

    def start(self) -> None:
        self._since = time.perf_counter()

    def stop(self) -> None:
        if self._since is not None:
            self.seconds += time.perf_counter() - self._since
            self._since = None

    @property
    def running(self) -> bool:
        return self._since is not None


class DraftBuffer:
    """The round's drafts, grown one step of n tokens at a time by `_step` (subclasses)."""

    def __init__(self, n: int, vocab_size: int, sampling: SamplingConfig):
        self.n = int(n)
        self.vocab_size = int(vocab_size)
        self.sampling = sampling
        self.tokens: list[int] = []
        self.sources: list[str] = []  # the drafter that proposed each token
        self._confidences: list[float] = []
        self._probs: list[torch.Tensor] = []  # (n, V) per step, sampling only
        self.step_seconds: list[float] = []  # wall time of each step
        self.step_sources: list[str] = []  # which drafter ran each step
        self.empty = False  # True when the first step had nothing to offer: the round is an AR step
        self.policy_clock: Stopwatch | None = None  # stops while this buffer drafts (`engine._timed_choice`)

    @property
    def discarded(self) -> list[tuple[int, str]]:
        """(step index, drafter) of proposals made within a step and not used (a composite
        drafter's, or an iterative drafter's passes before a step's last); their time is in that
        step's step_seconds. A single-pass drafter has none."""
        return []

    def _step(self) -> tuple[list[int], list[float], torch.Tensor | None, str]:
        """Draft n more tokens after `self.tokens`: (tokens, q_i, (n, V) proposal probs or None, source)."""
        raise NotImplementedError

    @property
    def confidences(self) -> np.ndarray:
        return np.asarray(self._confidences, dtype=np.float64)  # (drafted,)

    @property
    def blocks(self) -> int:
        return len(self.step_seconds)

    @property
    def seconds(self) -> float:
        return self.draft_seconds(self.blocks)

    def draft_seconds(self, steps: int) -> float:
        """Wall time of the first `steps` steps (proposals they made and did not use included)."""
        return float(sum(self.step_seconds[:steps]))

    def draft_probs(self, d: int) -> torch.Tensor:
        """The proposal distributions of drafts 1..d over the full target vocabulary, (d, V); sampling only."""
        return torch.cat(self._probs, dim=0)[:d]

    def draw(self, d: int, rng) -> tuple[list[int], torch.Tensor | None]:
        """The d drafts to verify and their proposal distributions (d, V): greedy, the chain itself
        (None); sampling, x_i drawn from proposal i with the round's w[i - 1] (`verify.Randomness`),
        so drawing more drafts never changes the first ones. A deterministic proposal (one-hot)
        gives its chain token."""
        if self.sampling.greedy:
            return self.tokens[:d], None
        probs = self.draft_probs(d) if d else torch.zeros(0, self.vocab_size, dtype=torch.float64)  # (d, V)
        return [rng.draw(i, probs[i]) for i in range(d)], probs

    def propose(self, chain: list[int]) -> tuple[list[int], list[float], torch.Tensor | None, str]:
        """One step of proposals after `chain` (a composite drafter's chain so far, other sources'
        tokens included), which becomes this buffer's chain; the step is returned, not appended
        (the composite keeps it): (tokens, q_i, proposal probs or None, source)."""
        self.tokens = list(chain)
        return self._step()

    def candidates(self, i: int, k: int) -> tuple[list[int], list[float]]:
        """Up to k most likely tokens at draft position i (0-based) and their probabilities, most
        likely first (a draft tree's choices). A drafter with one proposal per position offers it."""
        return [self.tokens[i]], [self._confidences[i]]

    def ensure(self, length: int) -> None:
        """Draft just enough steps to hold `length` tokens."""
        missing = length - len(self.tokens)
        if missing > 0:
            self.extend(-(-missing // self.n))

    @torch.inference_mode()
    def extend(self, num_blocks: int) -> None:
        if num_blocks < 0:
            raise ValueError(f"num_blocks must be >= 0, got {num_blocks}")
        clock = self.policy_clock if self.policy_clock is not None and self.policy_clock.running else None
        if clock is not None:
            clock.stop()  # a policy asked for these blocks: drafting time, not the policy's
        try:
            self._draft(num_blocks)
        finally:
            if clock is not None:
                clock.start()

    def _draft(self, num_blocks: int) -> None:
        for _ in range(num_blocks):
            start = time.perf_counter()
            tokens, q, probs, source = self._step()
            self.tokens.extend(tokens)
            self._confidences.extend(q)
            self.sources.extend([source] * len(tokens))
            if probs is not None:
                self._probs.append(probs)
            self.step_sources.append(source)
            self.step_seconds.append(time.perf_counter() - start)

    def steps_for(self, d: int) -> int:
        """Steps a round needs to reach d drafts (0 for d = 0: an AR step drafts nothing)."""
        return -(-int(d) // self.n)

    def steps_run(self, steps: int) -> list[str]:
        """The source of every drafting step the round's first `steps` steps ran, the proposals made
        within them and not used included: what `cost.drafting_s` prices."""
        return self.step_sources[:steps] + [source for step, source in self.discarded if step < steps]


def one_hot(tokens: list[int], vocab_size: int) -> torch.Tensor:
    """The proposal distribution of deterministic drafts: probability 1 on each token, (k, V)."""
    probs = torch.zeros(len(tokens), vocab_size, dtype=torch.float64)
    probs[torch.arange(len(tokens)), torch.tensor(tokens, dtype=torch.long)] = 1.0
    return probs


class Drafter(Protocol):
    """A source of drafts for one target model (docs/ARCHITECTURE.md, "The drafter interface")."""

    name: str  # the registry name (`drafters.DRAFTERS`)
    n: int  # drafts per step; a policy extends d by whole steps
    needs_features: bool  # whether `fit_context` reads the target's hidden states

    @classmethod
    def drafting(cls, kept: Sequence[str] = (), n: int | None = None) -> Drafting:
        """How a round of this drafter drafts, to price it at any d (`cost.Drafting`); `kept` is a
        recorded round's source per step, which a composite drafter's mix depends on; n, the
        drafts per step, bounds an iterative drafter's passes a step."""

    def new_context(self) -> object:
        """An empty per-sequence context."""

    def context_length(self, context) -> int:
        """How many committed tokens the context holds."""

    def fit_context(self, context, ids: list[int], hidden_states, first_position: int) -> None:
        """Make the context hold exactly ids[:-1] (the newest token is the next round's anchor).

        `hidden_states` are the target's outputs for the tokens from `first_position` on
        (None when the context only shrinks or the drafter reads no features).
        """

    def start_round(self, context, ids: list[int], sampling: SamplingConfig) -> DraftBuffer:
        """A buffer for this round, anchored at ids[-1]; nothing is drafted yet (and nothing sampled:
        proposal distributions follow `sampling`, drafts are drawn by `DraftBuffer.draw`)."""
