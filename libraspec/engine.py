"""SpeculativeDecoder: the round loop (DESIGN.md section 2), the AR baseline, the oracle.

Symbols follow the LibraSpec paper: n drafts per drafter pass, d the length submitted for
verification, d_max its cap, q_i drafter confidences, tau = accepted + 1 tokens committed
per round, d* the oracle length (DESIGN.md section 4).

Cache invariant, kept by `_fit_caches` (the one place that rolls caches back): the target
cache and the drafter context both hold every committed token except the newest, which is
the next round's anchor. Prefill is not timed in any mode; measured seconds are drafting,
policy and verification wall clock (DESIGN.md section 5).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Iterator

import torch

from .cost import LatencyProfile
from .draft import DraftBuffer
from .models.target import crop_cache
from .oracle import oracle_length
from .policy import LengthPolicy, epsilon_bounds
from .records import RoundRecord
from .verify import SamplingConfig, acceptance_prefix, greedy_accept, probabilities, sample_accept

POLICY_MODES = ("static", "libraspec", "g4", "failfast")
MODES = ("ar", "oracle") + POLICY_MODES


@dataclass(frozen=True)
class DecodeConfig:
    max_new_tokens: int = 128
    temperature: float = 0.0  # 0 = greedy
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    d_max: int = 24  # cap of the oracle's look-ahead (oracle mode and annotation)
    annotate_oracle: bool = False  # compute d* for each round of a policy mode, untimed

    def __post_init__(self):
        if isinstance(self.max_new_tokens, bool) or int(self.max_new_tokens) != self.max_new_tokens \
                or self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be an integer >= 1, got {self.max_new_tokens!r}")
        if isinstance(self.d_max, bool) or int(self.d_max) != self.d_max or self.d_max < 1:
            raise ValueError(f"d_max must be an integer >= 1, got {self.d_max!r}")

    @property
    def sampling(self) -> SamplingConfig:
        return SamplingConfig(self.temperature, self.top_k, self.top_p)


@dataclass
class _State:
    """One sequence being decoded: committed ids, both caches, clocks."""

    ids: list[int]
    prompt_len: int
    target_cache: object
    drafter_cache: object
    generator: torch.Generator
    rounds: int = 0
    seconds: float = 0.0
    modeled: float = 0.0
    history: list = field(default_factory=list)

    @property
    def generated(self) -> int:
        return len(self.ids) - self.prompt_len


class SpeculativeDecoder:
    """Runs AR, oracle and policy modes over one target/drafter pair (batch size 1)."""

    def __init__(self, pair, profile: LatencyProfile | None = None):
        self.pair = pair
        self.target = pair.target
        self.drafter = pair.drafter
        check_compatible(self.target, self.drafter)
        self.n = int(self.drafter.block_size) - 1
        self._profile = profile
        self.eos_ids = frozenset(self.target.eos_token_ids) | frozenset(getattr(pair, "stop_ids", ()))

    @property
    def profile(self) -> LatencyProfile:
        if self._profile is None:
            from .profiling import cached_profile
            self._profile = cached_profile(self.pair)
        return self._profile

    def run(self, prompt_ids, mode: str, policy: LengthPolicy | None, config: DecodeConfig) -> Iterator[RoundRecord]:
        """Decode `prompt_ids`; yields one frozen RoundRecord per round."""
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
        if (policy is None) != (mode in ("ar", "oracle")):
            raise ValueError(f"mode {mode!r} {'needs' if mode in POLICY_MODES else 'takes no'} policy")
        sampling = config.sampling
        limit = self.target.max_positions - 1
        for name, value in (("config.d_max", config.d_max), ("policy.d_max", getattr(policy, "d_max", 1))):
            if value > limit:
                raise ValueError(f"{name}={value} is beyond the target's context window ({limit + 1})")
        state = self._prefill(prompt_ids, config.seed)
        profile = self.profile
        if policy is not None:
            policy.reset()
        while True:
            if mode == "ar":
                record = self._ar_step(state, sampling, profile)
            else:
                record = self._round(state, mode, policy, config, sampling, profile)
            finished = (record.committed_tokens and record.committed_tokens[-1] in self.eos_ids) \
                or state.generated >= config.max_new_tokens or len(state.ids) >= self.target.max_positions
            if finished:
                record = _replace(record, finished=True)
            if policy is not None:
                policy.update(record)
            yield record
            if finished:
                return

    # -- steps -------------------------------------------------------------------------------

    def _prefill(self, prompt_ids, seed: int) -> _State:
        ids = [int(t) for t in prompt_ids]
        if not ids:
            raise ValueError("the prompt is empty: give at least one token")
        if len(ids) >= self.target.max_positions:
            raise ValueError(f"the prompt has {len(ids)} tokens; the target's context window is "
                             f"{self.target.max_positions}, leaving no room to generate")
        bad = [t for t in ids if not 0 <= t < self.target.vocab_size]
        if bad:
            raise ValueError(f"prompt token ids outside the vocabulary (size {self.target.vocab_size}): {bad[:5]}")
        state = _State(ids=ids, prompt_len=len(ids), target_cache=self.target.new_cache(),
                       drafter_cache=self.drafter.new_cache(),
                       generator=torch.Generator().manual_seed(int(seed)))
        if len(ids) > 1:
            out = self.target.forward(state.target_cache, ids[:-1])
            self.drafter.extend_context(state.drafter_cache, self.drafter.target_features(out.hidden_states),
                                        torch.arange(len(ids) - 1).view(1, -1))
        return state

    def _ar_step(self, state: _State, sampling: SamplingConfig, profile: LatencyProfile) -> RoundRecord:
        start = time.perf_counter()
        logits = self.target.forward(state.target_cache, state.ids[-1:], with_hidden=False).logits  # (1, V)
        if sampling.greedy:
            token = int(logits[0].argmax())
        else:
            token = int(torch.multinomial(probabilities(logits[0], sampling).float().cpu(), 1, generator=state.generator))
        state.ids.append(token)
        verify_s = time.perf_counter() - start
        return self._record(state, "ar", (), (), 0, (), (), 0, 0, [token], token, None,
                            0.0, 0.0, verify_s, profile.ar_token_time())

    def _round(self, state: _State, mode: str, policy, config: DecodeConfig,
               sampling: SamplingConfig, profile: LatencyProfile) -> RoundRecord:
        L = len(state.ids)
        # d may not commit past max_new_tokens nor verify past the context window
        cap = max(0, min(config.max_new_tokens - state.generated - 1, self.target.max_positions - L))
        uniforms = None if sampling.greedy else \
            torch.rand(max(config.d_max, getattr(policy, "d_max", 0)) + self.n, generator=state.generator)
        buffer = DraftBuffer(self.drafter, state.drafter_cache, state.ids[-1], L - 1,
                             self.target.vocab_size, sampling, state.generator)
        # 1. draft the first block (Algorithm 1 line 3)
        buffer.extend(1)
        # 2. choose the length d
        oracle_d, steps = None, ()
        if mode == "oracle":
            oracle_d = self._oracle_length(state, buffer, min(config.d_max, cap), sampling, uniforms, profile)
            d = oracle_d if cap else 0
            draft_s = sum(buffer.pass_seconds[:max(1, -(-d // self.n))])
            blocks, policy_s = max(1, -(-d // self.n)), 0.0
        else:
            drafted_before = buffer.seconds
            start = time.perf_counter()
            d = int(policy.choose_length(buffer))
            policy_s = time.perf_counter() - start - (buffer.seconds - drafted_before)
            steps = tuple(policy.last_steps)
            d, draft_s, blocks = min(d, cap), buffer.seconds, buffer.blocks
        drafts, confidences = tuple(buffer.tokens), tuple(buffer.confidences.tolist())
        eps = tuple(epsilon_bounds(confidences[:d], policy.alpha).tolist()) \
            if d and hasattr(policy, "alpha") else ()
        if config.annotate_oracle and mode != "oracle" and cap:
            saved = state.generator.get_state()  # annotation must not disturb this mode's randomness
            oracle_d = self._oracle_length(state, buffer, min(config.d_max, cap), sampling, uniforms, profile)
            state.generator.set_state(saved)
        # 3. verify [last token, x_1..x_d] in one target forward
        start = time.perf_counter()
        draft_ids = torch.tensor(drafts[:d], dtype=torch.long)
        out = self.target.forward(state.target_cache, [state.ids[-1]] + list(drafts[:d]))
        # 4. accept the longest valid prefix and take the bonus / correction token
        if sampling.greedy:
            accepted, bonus = greedy_accept(draft_ids, out.logits)
        else:
            accepted, bonus = sample_accept(draft_ids, buffer.draft_probs(d), out.logits, sampling,
                                            uniforms, state.generator)
        committed = self._truncate(list(drafts[:accepted]) + [bonus], config.max_new_tokens - state.generated)
        # 5. commit, then roll back every cache to the committed length
        state.ids.extend(committed)
        self._fit_caches(state, out.hidden_states, L - 1)
        verify_s = time.perf_counter() - start
        # 6. record
        modeled = profile.draft_time(blocks) + profile.verify_time(d + 1)
        return self._record(state, mode, drafts[:blocks * self.n], confidences[:blocks * self.n], blocks,
                            steps, eps, d, accepted, committed,
                            bonus if committed[-1] == bonus and len(committed) == accepted + 1 else None,
                            oracle_d, draft_s, max(policy_s, 0.0), verify_s, modeled)

    def _oracle_length(self, state: _State, buffer: DraftBuffer, D: int, sampling: SamplingConfig,
                       uniforms, profile: LatencyProfile) -> int | None:
        """d* = argmax_d (a(d) + 1) / T_round(d) from one look-ahead verification of D drafts."""
        if D < 1:
            return None
        buffer.ensure(D)
        drafts = torch.tensor(buffer.tokens[:D], dtype=torch.long)
        out = self.target.forward(state.target_cache, [state.ids[-1]] + buffer.tokens[:D], with_hidden=False)
        probs = None if sampling.greedy else buffer.draft_probs(D)
        prefix = acceptance_prefix(drafts, probs, out.logits, sampling, uniforms)
        self._fit_caches(state, None, None)
        return oracle_length(prefix.numpy(), profile.round_time)

    # -- helpers -------------------------------------------------------------------------------

    def _fit_caches(self, state: _State, hidden_states, first_position: int | None) -> None:
        """The one rollback: crop the target cache to len(ids) - 1 and bring the drafter context
        to the same length, appending the target features of newly verified tokens."""
        keep = len(state.ids) - 1
        crop_cache(state.target_cache, keep)
        have = state.drafter_cache.length
        if have > keep:
            self.drafter.crop(state.drafter_cache, keep)
        elif have < keep:
            feats = self.drafter.target_features(hidden_states)[:, : keep - have]  # (1, new, L*H)
            positions = torch.arange(first_position, first_position + feats.shape[1]).view(1, -1)
            self.drafter.extend_context(state.drafter_cache, feats, positions)

    def _truncate(self, tokens: list[int], room: int) -> list[int]:
        """Stop exactly where AR decoding would: after the first EOS, or at max_new_tokens."""
        tokens = tokens[:room]
        for i, t in enumerate(tokens):
            if t in self.eos_ids:
                return tokens[: i + 1]
        return tokens

    def _record(self, state: _State, mode, drafts, confidences, blocks, steps, eps, d, accepted, committed,
                bonus, oracle_d, draft_s, policy_s, verify_s, modeled) -> RoundRecord:
        state.seconds += draft_s + policy_s + verify_s
        state.modeled += modeled
        record = RoundRecord(
            mode=mode, round_index=state.rounds, start_position=len(state.ids) - len(committed),
            draft_tokens=tuple(int(t) for t in drafts), confidences=tuple(float(q) for q in confidences),
            blocks_drafted=int(blocks), policy_steps=tuple(steps), eps_bounds=tuple(int(e) for e in eps),
            chosen_length=int(d), accepted=int(accepted), committed_tokens=tuple(int(t) for t in committed),
            bonus_token=None if bonus is None else int(bonus), oracle_length=oracle_d,
            draft_s=float(draft_s), policy_s=float(policy_s), verify_s=float(verify_s), modeled_s=float(modeled),
            cumulative_tokens=state.generated, cumulative_s=state.seconds, cumulative_modeled_s=state.modeled)
        state.rounds += 1
        return record


def check_compatible(target, drafter) -> None:
    """A drafter must share the target's vocabulary and read hidden states it really has."""
    cfg = drafter.config
    if int(cfg.vocab_size) != target.vocab_size:
        raise ValueError(f"drafter vocabulary ({cfg.vocab_size}) differs from the target's ({target.vocab_size})")
    target_hidden = int(getattr(cfg, "target_hidden_size", None) or cfg.hidden_size)
    if target_hidden != target.hidden_size:
        raise ValueError(f"drafter expects target hidden size {target_hidden}, the target has {target.hidden_size}")
    bad = [i for i in drafter.target_layer_ids if not 0 <= i < target.num_layers]
    if bad:
        raise ValueError(f"drafter taps target layers {bad}, but the target has {target.num_layers} layers")


def _replace(record: RoundRecord, **changes) -> RoundRecord:
    import dataclasses
    return dataclasses.replace(record, **changes)


def race(decoder: SpeculativeDecoder, prompt_ids, entries: dict, config: DecodeConfig) -> Iterator[tuple[str, RoundRecord]]:
    """Decode one prompt in several modes, interleaved round by round.

    entries: label -> policy, or None for the "ar" and "oracle" modes; a label names its mode
    ("libraspec", "static", ...) or is "label:mode" for two runs of one mode. The mode whose
    measured clock is furthest behind always runs next, so events come out in the order of
    each mode's own measured time: the faster mode finishes first, honestly timed.
    """
    runs = {}
    for label, policy in entries.items():
        mode = label.split(":", 1)[-1]
        runs[label] = decoder.run(prompt_ids, mode, policy, config)
    clocks = {label: 0.0 for label in runs}
    while runs:
        label = min(runs, key=lambda key: clocks[key])
        record = next(runs[label], None)
        if record is None:
            del runs[label]
            continue
        clocks[label] = record.cumulative_s
        yield label, record
        if record.finished:
            del runs[label]
