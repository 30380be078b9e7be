"""Draft traces: what a drafter proposes from every position of a known greedy text.

Greedy decoding's text is fixed (it equals AR's), and every drafter here drafts from the
committed prefix alone: its context holds the committed tokens (and, for block diffusion, the
target's features of them), and a round's steps are conditioned on the anchor and the chain
drafted so far, never on earlier rounds. So the rounds of any length policy are a function of
what the drafter proposes from each position g of the output. `record_trace` runs the engine's
own drafter code once per position, with the target features of one forward over the whole
text, and stores every step up to a look-ahead: tokens, q_i, the source of each step, proposals
made and not used, and each position's top-k candidates with their probabilities (what draft
trees read). `analysis.replay.ReplayDecoder` then runs the engine's rounds against the trace.

Exactness: a look-up drafter reads ids only, so its trace equals what the engine drafts. A
block-diffusion drafter reads target features, and the engine computes those in verification
forwards of a few tokens, the trace in one forward over the text: the same numbers up to
floating-point rounding, so a replayed round can differ from the engine's where two candidates
are nearly tied (`benchmarks/replay_check.py` counts how often).

Arrays, A anchors (one per output position), S steps of n tokens at most, K candidates:
tokens (A, S*n) int64, q (A, S*n) float64, cand_tokens (A, S*n, K) int64 (-1: none),
cand_probs (A, S*n, K) float64, steps (A,) the steps drafted at each anchor (1 where the first
step had nothing to offer).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..drafters import DraftBuffer, make_drafter
from ..engine import end_ids
from ..files import atomic_write
from ..verify import SamplingConfig

TRACE_FORMAT = 1


class TraceTooShort(ValueError):
    """A replay asked for more drafts, or more candidates, than the trace recorded."""


@dataclass(frozen=True)
class DraftTrace:
    """A drafter's proposals from every position of one prompt's greedy output (module docstring)."""

    prompt: tuple[int, ...]
    output: tuple[int, ...]  # the target's greedy continuation (AR's text)
    drafter: str  # registry name of the drafter traced
    n: int
    needs_features: bool  # whether the drafter reads target features (its rounds pay upkeep)
    vocab_size: int
    max_positions: int  # the target's context window
    eos_ids: tuple[int, ...]  # tokens that end a run (the target's and the pair's stop ids)
    max_new_tokens: int  # the budget the output was generated under
    tokens: np.ndarray  # (A, S*n)
    q: np.ndarray  # (A, S*n)
    steps: np.ndarray  # (A,)
    step_sources: tuple[tuple[str, ...], ...]  # per anchor, the source of each step
    discarded: tuple[tuple[tuple[int, str], ...], ...]  # per anchor, (step, source) proposals not used
    empty: np.ndarray  # (A,) bool: the first step had nothing to offer
    cand_tokens: np.ndarray  # (A, S*n, K)
    cand_probs: np.ndarray  # (A, S*n, K)
    meta: dict = field(default_factory=dict, compare=False)  # provenance, seconds spent

    @property
    def lookahead(self) -> int:
        """Drafts recorded at every anchor whose first step offered any."""
        return int(self.tokens.shape[1])

    @property
    def top_k(self) -> int:
        return int(self.cand_tokens.shape[2])

    def __len__(self) -> int:
        return len(self.output)

    def matches(self, g: int) -> int:
        """How many of anchor g's drafts equal the output from position g on: greedy acceptance of
        the whole recorded chain (0 where the first step was empty)."""
        if self.empty[g]:
            return 0
        chain, rest = self.tokens[g, : self.steps[g] * self.n], self.output[g:]
        k = min(len(chain), len(rest))
        differ = np.nonzero(chain[:k] != np.asarray(rest[:k]))[0]
        return int(differ[0]) if len(differ) else k

    def save(self, path: str | Path) -> Path:
        """One compressed .npz (arrays plus the JSON header), written atomically."""
        header = {
            "format": TRACE_FORMAT,
            "prompt": list(self.prompt),
            "output": list(self.output),
            "drafter": self.drafter,
            "n": self.n,
            "needs_features": self.needs_features,
            "vocab_size": self.vocab_size,
            "max_positions": self.max_positions,
            "eos_ids": list(self.eos_ids),
            "max_new_tokens": self.max_new_tokens,
            "step_sources": [list(s) for s in self.step_sources],
            "discarded": [[list(x) for x in d] for d in self.discarded],
            "meta": self.meta,
        }
        arrays = dict(
            tokens=self.tokens,
            q=self.q,
            steps=self.steps,
            empty=self.empty,
            cand_tokens=self.cand_tokens.astype(np.int32),
            cand_probs=self.cand_probs,
            header=np.frombuffer(json.dumps(header).encode(), dtype=np.uint8),
        )

        def write(tmp: str) -> None:
            with open(tmp, "wb") as handle:  # a handle: given a path, numpy would append ".npz"
                np.savez_compressed(handle, **arrays)

        return Path(atomic_write(path, write))

    @classmethod
    def load(cls, path: str | Path) -> "DraftTrace":
        try:
            with np.load(path, allow_pickle=False) as data:
                header = json.loads(bytes(data["header"]).decode())
                arrays = {key: data[key] for key in ("tokens", "q", "steps", "empty", "cand_tokens", "cand_probs")}
        except (OSError, ValueError, KeyError, json.JSONDecodeError) as err:
            raise ValueError(f"{path} is not a readable draft trace ({err}); record it again") from err
        if header.get("format") != TRACE_FORMAT:
            raise ValueError(f"{path} has trace format {header.get('format')}, this code reads {TRACE_FORMAT}")
        return cls(
            prompt=tuple(header["prompt"]),
            output=tuple(header["output"]),
            drafter=header["drafter"],
            n=int(header["n"]),
            needs_features=bool(header["needs_features"]),
            vocab_size=int(header["vocab_size"]),
            max_positions=int(header["max_positions"]),
            eos_ids=tuple(header["eos_ids"]),
            max_new_tokens=int(header["max_new_tokens"]),
            tokens=arrays["tokens"].astype(np.int64),
            q=arrays["q"],
            steps=arrays["steps"],
            step_sources=tuple(tuple(s) for s in header["step_sources"]),
            discarded=tuple(tuple((int(k), str(s)) for k, s in d) for d in header["discarded"]),
            empty=arrays["empty"].astype(bool),
            cand_tokens=arrays["cand_tokens"].astype(np.int64),
            cand_probs=arrays["cand_probs"],
            meta=header["meta"],
        )


def record_trace(*args, **named) -> DraftTrace:
    """`iter_trace`'s trace, without its steps (the same arguments)."""
    *_, trace = iter_trace(*args, **named)
    return trace


@torch.inference_mode()
def iter_trace(
    pair,
    drafter: str,
    prompt: list[int],
    output: list[int],
    max_new_tokens: int,
    lookahead: int,
    top_k: int = 1,
    meta: dict | None = None,
):
    """The trace of `drafter` (a registry name) over `prompt` and its greedy `output` (what AR
    decoding of at most `max_new_tokens` tokens produced): at every output position, the steps
    a round anchored there drafts, enough of them for `lookahead` drafts, and each drafted
    position's `top_k` candidates (a tree of node budget B needs top_k >= B).

    Yields the number of anchors done after each, then the trace (so that a caller can hold the
    model for one anchor at a time and show progress); `record_trace` returns the trace alone."""
    prompt, output = [int(t) for t in prompt], [int(t) for t in output]
    if not prompt or not output or len(output) > max_new_tokens:
        raise ValueError(
            f"a trace needs a prompt and 1..max_new_tokens = {max_new_tokens} output tokens, "
            f"got {len(prompt)} and {len(output)}"
        )
    if lookahead < 1 or top_k < 1:
        raise ValueError(f"lookahead and top_k must be >= 1, got {lookahead} and {top_k}")
    started = time.perf_counter()
    source = make_drafter(drafter, pair)
    target, n = pair.target, source.n
    ids = prompt + output
    hidden = None
    if source.needs_features:  # the target's features of every token but the last, in one forward
        hidden = target.forward(target.new_cache(), ids[:-1], with_hidden=True).hidden_states  # each (1, L-1, H)
    features_s = time.perf_counter() - started
    steps_max = -(-lookahead // n)
    A, width = len(output), steps_max * n
    tokens = np.zeros((A, width), dtype=np.int64)
    q = np.zeros((A, width), dtype=np.float64)
    cand_tokens = np.full((A, width, top_k), -1, dtype=np.int64)
    cand_probs = np.zeros((A, width, top_k), dtype=np.float64)
    steps, empty = np.zeros(A, dtype=np.int64), np.zeros(A, dtype=bool)
    sources, discarded = [], []
    context = source.new_context()
    greedy = SamplingConfig()
    busy = time.perf_counter() - started  # seconds spent working (a caller may pause between anchors)
    for g in range(A):
        step_start = time.perf_counter()
        prefix = ids[: len(prompt) + g]
        have, keep = source.context_length(context), len(prefix) - 1
        rows = None if hidden is None else tuple(h[:, have:keep] for h in hidden)
        if keep > have:
            source.fit_context(context, prefix, rows, have)
        buffer = source.start_round(context, prefix, greedy)
        buffer.extend(1)
        if not buffer.empty:
            buffer.ensure(width)
        _store(buffer, g, tokens, q, cand_tokens, cand_probs, top_k)
        steps[g], empty[g] = buffer.blocks, buffer.empty
        sources.append(tuple(buffer.step_sources))
        discarded.append(tuple(buffer.discarded))
        busy += time.perf_counter() - step_start
        yield g + 1
    eos = end_ids(pair)
    info = {"pair": getattr(pair, "name", "?"), "device": str(target.device)}
    info.update(meta or {})
    info.update(features_s=round(features_s, 4), seconds=round(busy, 4))
    yield DraftTrace(
        prompt=tuple(prompt),
        output=tuple(output),
        drafter=drafter,
        n=n,
        needs_features=source.needs_features,
        vocab_size=target.vocab_size,
        max_positions=target.max_positions,
        eos_ids=tuple(sorted(eos)),
        max_new_tokens=int(max_new_tokens),
        tokens=tokens,
        q=q,
        steps=steps,
        step_sources=tuple(sources),
        discarded=tuple(discarded),
        empty=empty,
        cand_tokens=cand_tokens,
        cand_probs=cand_probs,
        meta=info,
    )


def _store(buffer: DraftBuffer, g: int, tokens, q, cand_tokens, cand_probs, top_k: int) -> None:
    drafted = min(len(buffer.tokens), tokens.shape[1])
    tokens[g, :drafted] = buffer.tokens[:drafted]
    q[g, :drafted] = buffer.confidences[:drafted]
    for i in range(drafted):
        ids, probs = buffer.candidates(i, top_k)
        cand_tokens[g, i, : len(ids)] = ids
        cand_probs[g, i, : len(probs)] = probs


class TraceBuffer(DraftBuffer):
    """A round's drafts read back from a trace at output position g, step by step as a policy asks."""

    def __init__(self, trace: DraftTrace, g: int):
        super().__init__(trace.n, trace.vocab_size, SamplingConfig())
        if not 0 <= g < len(trace):
            raise TraceTooShort(f"the trace covers output positions 0..{len(trace) - 1}, not {g}")
        self.trace, self.g = trace, g
        self._discarded: list[tuple[int, str]] = []

    @property
    def discarded(self) -> list[tuple[int, str]]:
        return self._discarded

    def _step(self):
        trace, g, k, n = self.trace, self.g, len(self.step_seconds), self.n
        if k >= trace.steps[g]:
            raise TraceTooShort(
                f"the trace holds {trace.lookahead} drafts per position; this replay needs more "
                f"(record it with a larger lookahead, at least d_max and the oracle's look-ahead)"
            )
        self._discarded.extend((step, source) for step, source in trace.discarded[g] if step == k)
        if k == 0 and trace.empty[g]:
            self.empty = True
        chunk = slice(k * n, (k + 1) * n)
        return trace.tokens[g, chunk].tolist(), trace.q[g, chunk].tolist(), None, trace.step_sources[g][k]

    def candidates(self, i: int, k: int) -> tuple[list[int], list[float]]:
        trace = self.trace
        ids, probs = trace.cand_tokens[self.g, i, :k], trace.cand_probs[self.g, i, :k]
        if k > trace.top_k and ids[-1] >= 0:  # the recorded list is full: more candidates may exist
            raise TraceTooShort(f"the trace holds {trace.top_k} candidates per position; node budget {k} needs {k}")
        kept = ids >= 0
        return ids[kept].tolist(), probs[kept].tolist()


class TraceDrafter:
    """The `Drafter` interface over a trace: its context is the committed length, its rounds
    `TraceBuffer`s (greedy only: a trace holds the drafter's chain, not samples)."""

    def __init__(self, trace: DraftTrace):
        self.trace = trace
        self.name = trace.drafter
        self.n = trace.n
        self.needs_features = trace.needs_features

    def new_context(self) -> list[int]:
        return [0]

    def context_length(self, context) -> int:
        return context[0]

    def fit_context(self, context, ids, hidden_states, first_position) -> None:
        context[0] = len(ids) - 1

    def start_round(self, context, ids, sampling) -> TraceBuffer:
        if not sampling.greedy:
            raise ValueError("a trace replays greedy decoding only (temperature 0)")
        return TraceBuffer(self.trace, len(ids) - len(self.trace.prompt))
