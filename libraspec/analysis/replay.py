"""Greedy rounds replayed without the target: the engine's own rounds, verified against a known text.

Greedy verification accepts the longest prefix of the drafts that equals the target's greedy
text and appends the target's next token; a draft tree accepts the root path that follows that
text. So once the target's greedy output of a prompt is known (an AR run), verification needs
no model. `ReplayDecoder` is the engine (`SpeculativeDecoder`) with the target's side of a round
(`_target_next`, `_verify_chain`, `_verify_tree` and the oracle's look-aheads) answered from the
output, and its drafter either an ids-only drafter (look-up, which drafts the same from the same
ids) or a `trace.TraceDrafter` (any drafter, from a recorded `DraftTrace`). Every round runs the
engine's code: the policy, Algorithm 1, the tree, the record and the price list (`cost.py`) are
the ones a real decode uses, so every mode, policy, setting and latency profile replays in
microseconds a round instead of a target forward.

The records have the engine's fields; their measured times are NaN (nothing ran on a target)
and their modeled times come from the given latency profile, as the engine's do (the engine
counts no draft past an end-of-sequence token as accepted, as the text ends there).
`best_schedule` finds the lengths that minimise a text's modeled time in hindsight.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Sequence

import numpy as np

from ..cost import LatencyProfile, ar_text_s, chain_prices
from ..engine import DecodeConfig, SpeculativeDecoder, _State
from ..modes import get_mode
from ..policy import LengthPolicy
from ..records import RoundRecord
from ..spec import RunSpec
from ..verify import Randomness, text_match
from .trace import DraftTrace, TraceBuffer, TraceDrafter

UNKNOWN = -1  # the token after the known text: never committed (the round's room cuts it)


class ReplayDecoder(SpeculativeDecoder):
    """`SpeculativeDecoder` whose target is a known greedy text (module docstring)."""

    measures_time = False

    def __init__(
        self,
        drafter,
        prompt,
        output,
        profile: LatencyProfile,
        *,
        vocab_size: int,
        max_positions: int = 1 << 30,
        eos_ids=(),
        max_new_tokens: int | None = None,
    ):
        target = SimpleNamespace(eos_token_ids=tuple(eos_ids), max_positions=max_positions, vocab_size=vocab_size)
        super().__init__(SimpleNamespace(target=target, stop_ids=()), profile, drafter)
        self.prompt, self.output = [int(t) for t in prompt], [int(t) for t in output]
        # the text ends where AR stopped: at an end token, or at the budget it was generated under
        self.ends_text = bool(self.output) and (
            self.output[-1] in self.eos_ids or (max_new_tokens is not None and len(self.output) < max_new_tokens)
        )

    @classmethod
    def from_trace(cls, trace: DraftTrace, profile: LatencyProfile) -> "ReplayDecoder":
        return cls(
            TraceDrafter(trace),
            trace.prompt,
            trace.output,
            profile,
            vocab_size=trace.vocab_size,
            max_positions=trace.max_positions,
            eos_ids=trace.eos_ids,
            max_new_tokens=trace.max_new_tokens,
        )

    def run(self, prompt_ids, mode: str, policy, config: DecodeConfig):
        if not config.sampling.greedy:
            raise ValueError("replay is greedy only (temperature 0): sampled text is not fixed")
        if config.max_new_tokens > len(self.output) and not self.ends_text:
            raise ValueError(
                f"the known text has {len(self.output)} new tokens and does not end there; "
                f"replay at most max_new_tokens = {len(self.output)}"
            )
        return super().run(prompt_ids, mode, policy, config)

    # -- the target's side, answered from the known text ------------------------------------

    def _prefill(self, prompt_ids, seed: int) -> _State:
        ids = [int(t) for t in prompt_ids]
        if ids != self.prompt:
            raise ValueError("replay needs the prompt its text was generated from")
        # the engine's look-aheads (the oracle, its annotation) read the known text too
        state = _State(ids, len(ids), None, self.drafter.new_context(), Randomness(int(seed)), known=tuple(self.output))
        self.drafter.fit_context(state.context, ids, None, 0)
        return state

    def _rest(self, state: _State) -> tuple[int, ...]:
        return state.known[state.generated :]

    def _target_next(self, state, sampling) -> int:
        rest = self._rest(state)
        return int(rest[0]) if len(rest) else UNKNOWN

    def _verify_chain(self, state, drafts, draft_probs, sampling, rng):
        rest = self._rest(state)
        accepted = text_match(drafts, rest)
        return accepted, int(rest[accepted]) if accepted < len(rest) else UNKNOWN, None

    def _verify_tree(self, state, tree, sampling, rng):
        rest = self._rest(state)
        path, node = [], -1
        while len(path) < len(rest):
            follow = [c for c in tree.children.get(node, ()) if tree.tokens[c] == rest[len(path)]]
            if not follow:
                break
            node = follow[0]
            path.append(node)
        return path, int(rest[len(path)]) if len(path) < len(rest) else UNKNOWN, None

    def _fit_caches(self, state, hidden_states, first_position, rows=None) -> None:
        self.drafter.fit_context(state.context, state.ids, None, None)


def trace_config(trace: DraftTrace, settings: RunSpec, **fields) -> DecodeConfig:
    """The config a replay of `trace` runs under, for the checked `settings`: greedy (a trace holds
    the target's greedy text, whatever temperature the settings name), the budget AR had, and the
    oracle's look-ahead at most the drafts the trace recorded (`DecodeConfig.of`). `fields` add to it."""
    base = dict(max_new_tokens=trace.max_new_tokens, temperature=0.0, seed=0)
    return DecodeConfig.of(settings, trace.lookahead, **(base | fields))


def replay(
    trace: DraftTrace,
    mode: str,
    profile: LatencyProfile,
    settings: RunSpec = RunSpec(),
    max_new_tokens: int | None = None,
    lookahead: int | None = None,
) -> list[RoundRecord]:
    """The rounds greedy decoding of the traced prompt runs in `mode` (any mode of `modes.MODES`)
    with `settings` (clamped by `RunSpec.checked`) under `profile`. With `lookahead`, policy
    and tree rounds also carry the oracle's d* over that many drafts (the oracle mode uses it too)."""
    decoder = ReplayDecoder.from_trace(trace, profile)
    settings, _ = settings.checked(trace.n, context=trace.max_positions)
    config = trace_config(
        trace,
        settings,
        max_new_tokens=max_new_tokens or trace.max_new_tokens,  # the budget AR had: the last rounds' room
        annotate_oracle=lookahead is not None and get_mode(mode).kind in ("policy", "tree"),
    )
    if lookahead:  # asked for: the oracle's d* over exactly that many drafts
        config = dataclasses.replace(config, lookahead=lookahead)
    return list(decoder.run(list(trace.prompt), mode, get_mode(mode).policy(settings, profile), config))


def rounds_reproduced(engine: Sequence[RoundRecord], replayed: Sequence[RoundRecord]) -> int:
    """How many rounds of a replay make the engine's round at the same index: the same d, accepted
    count and committed tokens (the measured checks' test of the replay against decoding)."""
    return sum(
        (a.chosen_length, a.accepted, a.committed_tokens) == (b.chosen_length, b.accepted, b.committed_tokens)
        for a, b in zip(engine, replayed)
    )


def replay_greedy(
    drafter,
    policy: LengthPolicy,
    prompt: list[int],
    output: list[int],
    max_new_tokens: int,
    profile: LatencyProfile,
    lookahead: int | None = None,
    *,
    eos_ids: Sequence[int] = (),
) -> list[RoundRecord]:
    """The rounds greedy speculative decoding of `prompt` with an ids-only `drafter` (look-up) and a
    policy mode's `policy` runs, given the target's greedy `output` (what AR decoding of at most
    `max_new_tokens` tokens produced; a shorter output ended at one of `eos_ids`, the tokens that
    end a run: `engine.end_ids(pair)`). With `lookahead`, each round with a draft also carries the
    oracle length d* over that many drafts, as the engine's annotation computes it."""
    if drafter.needs_features:
        raise ValueError(
            f"the {drafter.name} drafter reads the target's features: only the engine, or a recorded trace, can run it"
        )
    if not prompt or len(output) > max_new_tokens:
        raise ValueError(
            f"replay needs a prompt and at most max_new_tokens = {max_new_tokens} output tokens, "
            f"got {len(prompt)} and {len(output)}"
        )
    decoder = ReplayDecoder(
        drafter,
        prompt,
        output,
        profile,
        vocab_size=drafter.vocab_size,
        eos_ids=eos_ids,
        max_new_tokens=max_new_tokens,
    )
    if len(output) < max_new_tokens and (not output or output[-1] not in decoder.eos_ids):
        raise ValueError(
            f"the output has {len(output)} < max_new_tokens = {max_new_tokens} tokens and does not end at one "
            f"of eos_ids {sorted(decoder.eos_ids)}: pass the ids that ended it"
        )
    config = DecodeConfig.of(
        RunSpec(max_new_tokens=max_new_tokens, d_max=lookahead or RunSpec.d_max), annotate_oracle=bool(lookahead)
    )
    return list(decoder.run(prompt, policy.name, policy, config))


@dataclass(frozen=True)
class Schedule:
    """The best sequence of lengths in hindsight for one text, drafter and profile."""

    lengths: tuple[int, ...]  # d of each round
    starts: tuple[int, ...]  # output position each round starts at
    seconds: float  # modeled seconds of the whole output
    ar_seconds: float  # modeled seconds of AR decoding of the same output

    @property
    def speedup(self) -> float:
        return self.ar_seconds / self.seconds


def best_schedule(
    trace: DraftTrace, profile: LatencyProfile, lookahead: int | None = None, max_new_tokens: int | None = None
) -> Schedule:
    """The lengths d = 0..lookahead, one per round, that minimise the modeled time of the whole
    output (dynamic programming over output positions; every round drafts its first step, as the
    engine's do, and is priced by `cost.chain_prices`): the limit any chain length policy with this
    drafter reaches under this profile. A round at position g verifying d drafts commits
    min(d, m_g) + 1 tokens, m_g the trace's greedy match there."""
    N = min(len(trace.output), max_new_tokens or len(trace.output))
    D = min(lookahead or trace.lookahead, trace.lookahead)
    best = np.zeros(N + 1)
    choice = np.zeros(N, dtype=np.int64)
    for g in range(N - 1, -1, -1):
        buffer = TraceBuffer(trace, g)
        buffer.extend(1)
        top = 0 if buffer.empty else min(D, N - g - 1)  # d drafts commit up to d + 1 tokens
        if top:
            buffer.ensure(top)
        price, m = chain_prices(profile, buffer, trace.needs_features, len(trace.prompt) + g), trace.matches(g)
        totals = [price(d) + best[min(N, g + min(d, m) + 1)] for d in range(top + 1)]
        choice[g] = int(np.argmin(totals))
        best[g] = totals[choice[g]]
    lengths, starts, g = [], [], 0
    while g < N:
        starts.append(g)
        lengths.append(int(choice[g]))
        g += min(int(choice[g]), trace.matches(g)) + 1
    return Schedule(tuple(lengths), tuple(starts), float(best[0]), ar_text_s(profile, len(trace.prompt), N))


def modeled_seconds(records: list[RoundRecord]) -> float:
    return records[-1].cumulative_modeled_s if records else math.nan
