"""Greedy rounds replayed without the target, for drafters that draft from token ids alone.

Greedy verification accepts the longest prefix of the drafts that equals the target's greedy
text and appends the target's next token. So once the target's greedy output for a prompt is
known (an AR run, or a committed self-generated answer), a drafter that reads only token ids
(look-up: `needs_features` is False) makes the same drafts, the policy the same d and the target
would accept the same prefix, round for round, as the engine. A replay costs microseconds a
round instead of a target forward, which makes it cheap to compare length policies over many
prompts (benchmarks/lookup_alpha.py chooses alpha this way, on answers never evaluated on).

The records have the engine's fields; their measured times are NaN (nothing ran on a target)
and their modeled times come from the given latency profile, as the engine's do. One difference:
where the text ends at an end-of-sequence token, the engine may also accept drafts beyond it
(which it then cuts), so its last round can count more accepted drafts than the replay's.
"""

from __future__ import annotations

import math

from ..cost import LatencyProfile, chain_prices, chain_round_s
from ..oracle import oracle_length
from ..policy import Decision, LengthPolicy
from ..records import RoundRecord
from ..verify import SamplingConfig

NOT_MEASURED = math.nan  # a replay times nothing


def replay_greedy(
    drafter,
    policy: LengthPolicy,
    prompt: list[int],
    output: list[int],
    max_new_tokens: int,
    profile: LatencyProfile,
    lookahead: int | None = None,
) -> list[RoundRecord]:
    """The rounds greedy speculative decoding of `prompt` with `drafter` and `policy` runs, given the
    target's greedy `output` (what AR decoding of at most `max_new_tokens` tokens produced).
    With `lookahead`, each round with a draft also carries the oracle length d* over that many
    drafts, as the engine's annotation (`DecodeConfig.annotate_oracle`) computes it."""
    if drafter.needs_features:
        raise ValueError(f"the {drafter.name} drafter reads the target's features, so only the engine can run it")
    if not prompt or len(output) > max_new_tokens:
        raise ValueError(
            f"replay needs a prompt and at most max_new_tokens = {max_new_tokens} output tokens, "
            f"got {len(prompt)} and {len(output)}"
        )
    policy.reset()
    ids, context, records, modeled = list(prompt), drafter.new_context(), [], 0.0
    while (generated := len(ids) - len(prompt)) < len(output):
        cap = max(0, max_new_tokens - generated - 1)  # d drafts commit up to d + 1 tokens
        drafter.fit_context(context, ids, None, None)
        buffer = drafter.start_round(context, ids, SamplingConfig())
        buffer.extend(1)  # the first step, as in every engine round
        decision = Decision(0) if buffer.empty else policy.choose_length(buffer)
        decision = decision.capped(min(decision.d, cap), buffer.confidences)  # the round's room may cut d
        d = decision.d
        accepted = _accepted(buffer.tokens[:d], output[generated:])
        blocks = buffer.blocks  # the annotation's look-ahead drafts further; this round drafted these
        oracle_d = (
            _oracle_length(buffer, output[generated:], min(lookahead, cap), profile)
            if lookahead and cap and not buffer.empty
            else None
        )
        committed = output[generated : generated + accepted + 1]
        ids += committed
        step_s = chain_round_s(profile, buffer.steps_run(blocks), d, needs_features=False)  # ids only: no upkeep
        modeled += step_s
        shown = blocks * buffer.n
        record = RoundRecord(
            mode=policy.name,
            round_index=len(records),
            start_position=len(ids) - len(committed),
            draft_tokens=tuple(buffer.tokens[:shown]),
            confidences=tuple(float(q) for q in buffer.confidences[:shown]),
            draft_sources=tuple(buffer.sources[:shown]),
            blocks_drafted=blocks,
            policy_steps=decision.steps,
            eps_bounds=decision.eps_bounds,
            chosen_length=d,
            accepted=accepted,
            committed_tokens=tuple(committed),
            bonus_token=output[generated + accepted] if generated + accepted < len(output) else None,
            oracle_length=oracle_d,
            draft_s=NOT_MEASURED,
            policy_s=NOT_MEASURED,
            verify_s=NOT_MEASURED,
            modeled_s=step_s,
            cumulative_tokens=len(ids) - len(prompt),
            cumulative_s=NOT_MEASURED,
            cumulative_modeled_s=modeled,
            finished=len(ids) - len(prompt) >= len(output),
            alpha=decision.alpha,
        )
        policy.update(record)
        records.append(record)
    return records


def _accepted(drafts: list[int], rest: list[int]) -> int:
    """Greedy verification's accepted prefix: drafts equal to the target's next tokens."""
    accepted = 0
    while accepted < len(drafts) and accepted < len(rest) and drafts[accepted] == rest[accepted]:
        accepted += 1
    return accepted


def _oracle_length(buffer, rest: list[int], D: int, profile: LatencyProfile) -> int | None:
    """d* over d = 0..D drafts, as the engine's `_oracle_length` (a look-up drafter has no upkeep)."""
    if D < 1:
        return None
    buffer.ensure(D)
    a = _accepted(buffer.tokens[:D], rest)
    price = chain_prices(profile, buffer, needs_features=False)
    return oracle_length([min(d, a) for d in range(1, D + 1)], price, zero_time=price(0))  # greedy: a(d) = min(d, a)
