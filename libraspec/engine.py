"""SpeculativeDecoder: the round loop, the AR baseline, the oracle (docs/ARCHITECTURE.md, "A round").

Symbols follow the LibraSpec paper: n drafts per drafting step (a block), d the length submitted for
verification, d_max its cap, q_i drafter confidences, tau = accepted + 1 tokens committed
per round (accepted alone when an accepted draft is an EOS), d* the oracle length.

Cache invariant, kept by `_fit_caches` (the one place that rolls caches back): the target
cache and the drafter context both hold every committed token except the newest, which is
the next round's anchor. Prefill is not timed in any mode; measured seconds are drafting,
policy and verification wall clock (docs/ARCHITECTURE.md, "What is timed").
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import torch

from .cost import LatencyProfile, chain_prices, chain_round_s, drafting_s, tree_prices, tree_round_s
from .drafters import DraftBuffer, Drafter, make_drafter
from .drafters.base import Stopwatch
from .models.target import crop_cache, keep_rows
from .modes import AR, get_mode
from .oracle import oracle_length
from .policy import Decision, LengthPolicy
from .records import RoundRecord
from .spec import RunSpec
from .tree import TreeView, target_child_probs, text_child_probs, tree_accept, tree_oracle
from .verify import (
    Randomness,
    SamplingConfig,
    acceptance_prefix,
    greedy_accept,
    probabilities,
    sample_accept,
    text_match,
)


@dataclass(frozen=True)
class DecodeConfig:
    """How one run decodes. Built from a checked `RunSpec` by `DecodeConfig.of` (the one place that
    derives it); the defaults are the spec's."""

    max_new_tokens: int = RunSpec.max_new_tokens
    temperature: float = RunSpec.temperature  # 0 = greedy
    top_k: int = 0
    top_p: float = 1.0
    seed: int = RunSpec.seed
    lookahead: int = RunSpec.d_max  # drafts the oracle verifies in hindsight (oracle mode and annotation)
    annotate_oracle: bool = False  # compute d* for each round of a policy mode, untimed
    # the target's greedy output after the prompt when already known (a finished AR run under this
    # config): greedy look-aheads (the oracle and its annotation) read it instead of a target forward
    greedy_text: tuple[int, ...] | None = None

    def __post_init__(self):
        if (
            isinstance(self.max_new_tokens, bool)
            or int(self.max_new_tokens) != self.max_new_tokens
            or self.max_new_tokens < 1
        ):
            raise ValueError(f"max_new_tokens must be an integer >= 1, got {self.max_new_tokens!r}")
        if isinstance(self.lookahead, bool) or int(self.lookahead) != self.lookahead or self.lookahead < 1:
            raise ValueError(f"lookahead must be an integer >= 1, got {self.lookahead!r}")
        if self.greedy_text is not None:
            if self.temperature != 0:
                raise ValueError("greedy_text is the target's greedy output: it only serves temperature 0")
            object.__setattr__(self, "greedy_text", tuple(int(t) for t in self.greedy_text))

    @classmethod
    def of(cls, spec: RunSpec, recorded: int | None = None, **fields) -> DecodeConfig:
        """The config of a run of the checked `spec`: its max new tokens, temperature and seed, and
        the oracle's look-ahead, the one rule for it: d_max (the longest length a policy of the run
        may choose), or the drafts a replayed trace `recorded` per position when those are fewer.
        `fields` set the rest (top_k, top_p, annotate_oracle, greedy_text) or override one (a
        replay's max_new_tokens is its trace's)."""
        lookahead = spec.d_max if recorded is None else min(int(recorded), spec.d_max)
        derived = dict(max_new_tokens=spec.max_new_tokens, temperature=spec.temperature, seed=spec.seed)
        return cls(**(derived | dict(lookahead=lookahead) | fields))

    @property
    def sampling(self) -> SamplingConfig:
        return SamplingConfig(self.temperature, self.top_k, self.top_p)


@dataclass
class _State:
    """One sequence being decoded: committed ids, the target cache, the drafter context, clocks."""

    ids: list[int]
    prompt_len: int
    target_cache: object
    context: object  # the drafter's
    rng: Randomness  # every random number of the run (sampling only)
    known: tuple[int, ...] | None = None  # the target's greedy output after the prompt, when known
    rounds: int = 0
    seconds: float = 0.0
    modeled: float = 0.0

    @property
    def generated(self) -> int:
        return len(self.ids) - self.prompt_len


class SpeculativeDecoder:
    """Runs AR, oracle and policy modes over one target and one drafter (batch size 1).

    `drafter` is a registry name (`drafters.DRAFTERS`) or a `Drafter`; default: the pair's
    `default_drafter`.
    """

    measures_time = True  # False where nothing runs a model (a replay's measured fields are NaN)

    def __init__(self, pair, profile: LatencyProfile | None = None, drafter: str | Drafter | None = None):
        self.pair = pair
        self.target = pair.target
        drafter = pair.default_drafter if drafter is None else drafter
        self.drafter = make_drafter(drafter, pair) if isinstance(drafter, str) else drafter
        self.n = self.drafter.n
        self._profile = profile
        self.randomness = Randomness  # seed -> the run's random source (tests swap in one that enumerates)
        # called after every rollback with (committed ids, target cache, drafter context): a place to
        # check that the caches equal a rebuild from the committed tokens (tests/decoding.py)
        self.after_fit = None
        self.eos_ids = end_ids(pair)

    @property
    def profile(self) -> LatencyProfile:
        """The latency profile modeled times come from (measured or read from the disk cache on first use)."""
        if self._profile is None:
            from .profiling import cached_profile

            self._profile = cached_profile(self.pair)
        return self._profile

    @profile.setter
    def profile(self, profile: LatencyProfile) -> None:
        """A re-measured profile; runs already under way keep the one they started with."""
        self._profile = profile

    @property
    def measured_profile(self) -> LatencyProfile | None:
        """The profile if it is measured (or read) already, else None: never measures."""
        return self._profile

    def run(self, prompt_ids, mode: str, policy: LengthPolicy | None, config: DecodeConfig) -> Iterator[RoundRecord]:
        """Decode `prompt_ids`; yields one frozen RoundRecord per round. `policy` is a policy mode's
        length policy, a tree mode's tree policy (tree_policy.py), None for AR and the oracle."""
        kind = get_mode(mode).kind
        if (policy is None) != (kind not in ("policy", "tree")):
            raise ValueError(f"mode {mode!r} {'takes no' if policy is not None else 'needs a'} policy")
        sampling = config.sampling
        limit = self.target.max_positions - 1
        for name, value in (("config.lookahead", config.lookahead), ("policy.d_max", policy.d_max if policy else 1)):
            if value > limit:
                raise ValueError(f"{name}={value} is beyond the target's context window ({limit + 1})")
        state = self._prefill(prompt_ids, config.seed)
        if config.greedy_text is not None:
            self._check_known(state, config)
            state.known = config.greedy_text
        profile = self.profile
        if kind in ("policy", "tree"):
            policy.reset()
        while True:
            if kind == "ar":
                record = self._ar_step(state, sampling, profile)
            else:
                record = self._round(state, mode, policy, config, sampling, profile)
            finished = (
                (record.committed_tokens and record.committed_tokens[-1] in self.eos_ids)
                or state.generated >= config.max_new_tokens
                or len(state.ids) >= self.target.max_positions
            )
            if finished:
                record = _replace(record, finished=True)
            if kind in ("policy", "tree"):
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
            raise ValueError(
                f"the prompt has {len(ids)} tokens; the target's context window is "
                f"{self.target.max_positions}, leaving no room to generate"
            )
        bad = [t for t in ids if not 0 <= t < self.target.vocab_size]
        if bad:
            raise ValueError(f"prompt token ids outside the vocabulary (size {self.target.vocab_size}): {bad[:5]}")
        state = _State(
            ids=ids,
            prompt_len=len(ids),
            target_cache=self.target.new_cache(),
            context=self.drafter.new_context(),
            rng=self.randomness(int(seed)),
        )
        if len(ids) > 1:
            out = self.target.forward(state.target_cache, ids[:-1], with_hidden=self.drafter.needs_features)
            self.drafter.fit_context(state.context, ids, out.hidden_states, 0)
        return state

    def _ar_step(self, state: _State, sampling: SamplingConfig, profile: LatencyProfile) -> RoundRecord:
        start = time.perf_counter()
        token = self._target_next(state, sampling)
        state.ids.append(token)
        verify_s = time.perf_counter() - start
        times = _Times(verify_s, modeled_s=profile.ar_token_time(len(state.ids) - 1))  # after the context it saw
        return self._record(state, AR, _Outcome(Decision(0), 0, 0, [token], token), times)

    def _round(
        self, state: _State, mode: str, policy, config: DecodeConfig, sampling: SamplingConfig, profile: LatencyProfile
    ) -> RoundRecord:
        """One round of a chain or a tree mode, in the six steps of docs/ARCHITECTURE.md ("A round").
        What differs between the two shapes is a `_Chain` or a `_Tree`: a chain verifies its first d
        drafts; a tree (DDTree) verifies the best-first tree of the policy's node budget within depth
        d, built over the same drafts."""
        kind = get_mode(mode).kind  # "policy", "tree" or "oracle"
        L = len(state.ids)
        room = self._room(state, config)
        cap = max(0, room - 1)  # d drafts commit up to d + 1 tokens
        lookahead = min(config.lookahead, cap)
        rng = None if sampling.greedy else state.rng
        if rng is not None:  # the round's shared uniforms, drawn before any draft (a tree: per sibling rank)
            d_max = policy.d_max if policy else 0
            rng.start_round(max(config.lookahead, d_max) + self.n, policy.node_budget if kind == "tree" else 1)
        buffer = self.drafter.start_round(state.context, state.ids, sampling)
        shape = _Tree(self, buffer, policy.node_budget) if kind == "tree" else _Chain(self, buffer)
        # 1. draft the first block (Algorithm 1 line 3); the buffer holds distributions and their chain, no sample
        buffer.extend(1)
        # 2. choose d (a tree: its depth; 0 when the drafter had nothing to offer: an AR step)
        decision, policy_s, oracle = Decision(0), 0.0, (None, None)
        if buffer.empty:
            pass
        elif kind == "oracle":
            d_star, lossless_d = self._oracle_length(state, buffer, lookahead, sampling, rng, profile)
            decision, oracle = Decision(lossless_d), (d_star, None)
        else:
            decision, policy_s = _timed_choice(policy, shape.view, buffer)
        d = min(decision.d, cap)  # the round's room may cut d
        decision, settle_s = shape.settle(decision, d)
        # what the policy saw (a tree: per depth), before any look-ahead
        q = () if buffer.empty else shape.view.confidences
        decision = decision.capped(d, q)
        blocks = max(1, buffer.steps_for(d)) if kind == "oracle" else buffer.blocks  # the first was drafted
        if config.annotate_oracle and kind != "oracle" and lookahead and not buffer.empty:
            oracle = shape.oracle(state, lookahead, sampling, rng, profile)
        # 3. verify in one target forward: [last token, x_1..x_d] (sampling: the d drafts are drawn from
        #    their proposals only now), or [last token, nodes...] under the tree attention mask
        # 4. accept the longest valid prefix or root path (greedy: the target's argmax; sampling:
        #    rejection, recursive in a tree), then the bonus / correction token
        start = time.perf_counter()
        accepted_tokens, bonus, hidden_states = shape.verify(state, d, sampling, rng)
        committed = self._truncate(accepted_tokens + [bonus], room)
        accepted = min(len(accepted_tokens), len(committed))  # drafts past an EOS were never AR's tokens
        # 5. commit, then roll back every cache to the committed length (a tree: the root's and the
        #    accepted path's rows move into place)
        state.ids.extend(committed)
        self._fit_caches(state, hidden_states, L - 1, rows=shape.rows(accepted))
        verify_s = time.perf_counter() - start
        # 6. record: the drafts shown are the verified ones, then the drafter's chain past them (a
        #    tree: the chain, its nodes beside it)
        shown, steps = blocks * self.n, buffer.steps_run(blocks)
        verified = shape.verified()
        drafted = _Drafted(
            tokens=verified + buffer.tokens[len(verified) : shown],
            confidences=buffer.confidences[:shown].tolist(),
            sources=buffer.sources[:shown],
            blocks=blocks,
        )
        times = _Times(
            draft_s=buffer.draft_seconds(blocks),
            policy_s=policy_s + settle_s,
            verify_s=verify_s,
            modeled_s=shape.modeled_s(profile, steps, d, L),
            modeled_draft_s=drafting_s(profile, steps),
        )
        bonus_token = bonus if len(committed) == accepted + 1 else None
        outcome = _Outcome(decision, d, accepted, committed, bonus_token, *oracle)
        return self._record(state, mode, outcome, times, drafted, shape.tree_parts(accepted, q))

    def _tree_oracle(
        self,
        state: _State,
        view: TreeView,
        depth: int,
        sampling: SamplingConfig,
        rng: Randomness | None,
        profile: LatencyProfile,
    ) -> tuple[int, int]:
        """(depth*, nodes*) of the hindsight-best sub-tree of a look-ahead tree (the round's node
        budget, `depth` deep), verified once, untimed, under the round's uniforms (`tree.tree_oracle`)."""
        buffer = view.buffer
        buffer.ensure(depth)
        tree = view.tree(depth)
        child_probs = self._tree_child_probs(state, tree, sampling)
        # an EOS node and the nodes below it are never counted: a walk that would accept the EOS node
        # stops at its parent, whose +1 (the bonus) is the EOS, as the engine commits it
        stopped = [False] * len(tree)
        for j, parent in enumerate(tree.parents):
            stopped[j] = tree.tokens[j] in self.eos_ids or (parent >= 0 and stopped[parent])
        child_probs = child_probs * torch.as_tensor([0.0 if s else 1.0 for s in stopped], dtype=child_probs.dtype)
        price = tree_prices(profile, buffer, self.drafter.needs_features, len(state.ids))
        return tree_oracle(tree, child_probs, rng, price, zero_time=price(0, 0))

    def _oracle_length(
        self,
        state: _State,
        buffer: DraftBuffer,
        D: int,
        sampling: SamplingConfig,
        rng: Randomness | None,
        profile: LatencyProfile,
    ) -> tuple[int | None, int]:
        """(d*, the oracle mode's d) from one look-ahead verification of D drafts.

        d* = argmax_d (a(d) + 1) / T_round(d) over d = 0..D is the hindsight optimum the records
        carry. Greedy, verifying d* commits what any length would, so oracle mode uses it. When
        sampling, choosing d from the outcome would bias the text; under the round's shared
        uniforms, d = min(a(D) + 1, D) commits exactly what verifying all D drafts commits, so
        oracle mode takes that length and stays a sample of the target (docs/ARCHITECTURE.md,
        "Lossless verification").
        """
        if D < 1:
            return None, 0
        buffer.ensure(D)
        drafts, probs = buffer.draw(D, rng)  # the same first d drafts as a round that verifies d draws
        prefix = self._accepted_prefix(state, drafts, probs, sampling, rng)
        stops = [i for i, t in enumerate(drafts) if t in self.eos_ids]
        if stops:  # an accepted EOS draft commits as the bonus would: count neither it nor what follows
            prefix = np.minimum(prefix, stops[0])
        price = chain_prices(profile, buffer, self.drafter.needs_features, len(state.ids))
        d_star = oracle_length(prefix, price, zero_time=price(0))
        return d_star, d_star if sampling.greedy else min(int(prefix[-1]) + 1, D)

    # -- the target's side of a round (`analysis.replay.ReplayDecoder` answers these from a trace) --

    def _target_next(self, state: _State, sampling: SamplingConfig) -> int:
        """An AR step: the target's next token after the committed ids (the cache takes the anchor)."""
        logits = self.target.forward(state.target_cache, state.ids[-1:], with_hidden=False).logits  # (1, V)
        if sampling.greedy:
            return int(logits[0].argmax())
        return state.rng.sample(probabilities(logits[0], sampling))

    def _verify_chain(self, state: _State, drafts: list[int], draft_probs, sampling: SamplingConfig, rng):
        """Verify [last token, x_1..x_d] in one target forward: (accepted, bonus / correction token,
        the verified rows' hidden states for the drafter)."""
        out = self.target.forward(state.target_cache, [state.ids[-1]] + drafts, with_hidden=self.drafter.needs_features)
        draft_ids = torch.tensor(drafts, dtype=torch.long)
        if sampling.greedy:
            accepted, bonus = greedy_accept(draft_ids, out.logits)
        else:
            accepted, bonus = sample_accept(draft_ids, draft_probs, out.logits, sampling, rng)
        return accepted, bonus, out.hidden_states

    def _verify_tree(self, state: _State, tree, sampling: SamplingConfig, rng):
        """Verify [last token, nodes...] in one forward with the tree attention mask: (accepted node
        indices root to leaf, bonus / correction token, every row's hidden states)."""
        out = self.target.forward_tree(
            state.target_cache,
            state.ids[-1],
            tree.tokens,
            tree.parents,
            tree.depths,
            with_hidden=self.drafter.needs_features,
        )
        path, bonus = tree_accept(tree, out.logits, sampling, rng)
        return path, bonus, out.hidden_states

    def _accepted_prefix(self, state: _State, drafts: list[int], probs, sampling: SamplingConfig, rng):
        """The oracle's look-ahead: a(d) for d = 1..D from one verification of D drafts, untimed, caches
        rolled back after (`verify.acceptance_prefix`); read from the known greedy text when there is one."""
        text = self._known_rest(state)
        if text is not None:
            return np.minimum(np.arange(1, len(drafts) + 1), text_match(drafts, text))  # greedy: a(d) = min(d, a)
        out = self.target.forward(state.target_cache, [state.ids[-1]] + drafts, with_hidden=False)
        prefix = acceptance_prefix(torch.tensor(drafts, dtype=torch.long), probs, out.logits, sampling, rng)
        self._fit_caches(state, None, None)
        return prefix.numpy()

    def _tree_child_probs(self, state: _State, tree, sampling: SamplingConfig):
        """The tree oracle's look-ahead: each node's target probability at its parent, untimed; read
        from the known greedy text when there is one."""
        text = self._known_rest(state)
        if text is not None:
            return text_child_probs(tree, text)
        out = self.target.forward_tree(
            state.target_cache, state.ids[-1], tree.tokens, tree.parents, tree.depths, with_hidden=False
        )
        child_probs, _ = target_child_probs(tree, out.logits, sampling)
        self._fit_caches(state, None, None)
        return child_probs

    # -- helpers -------------------------------------------------------------------------------

    def _fit_caches(
        self, state: _State, hidden_states, first_position: int | None, rows: list[int] | None = None
    ) -> None:
        """The one rollback: crop the target cache to len(ids) - 1 and bring the drafter context
        to the same length, appending the target features of newly verified tokens.

        `rows` (a tree round) are the verified rows of the root and the accepted path: their
        K/V move into place in the target cache and their features alone reach the drafter."""
        keep = len(state.ids) - 1
        if rows is not None:
            rows = rows[: keep - first_position]  # the path EOS or the limit left in the sequence
            keep_rows(state.target_cache, first_position, [first_position + r for r in rows])
            index = torch.as_tensor(rows, dtype=torch.long)
            hidden_states = tuple(h[:, index.to(h.device)] for h in hidden_states)  # each (1, len(rows), H)
        crop_cache(state.target_cache, keep)
        self.drafter.fit_context(state.context, state.ids, hidden_states, first_position)
        if self.after_fit is not None:
            self.after_fit(state.ids, state.target_cache, state.context)

    def _check_known(self, state: _State, config: DecodeConfig) -> None:
        """A known greedy text must be all the target would write under `config`: it ends where AR
        stops (an end token, max_new_tokens, the context window), or look-aheads past it would
        read unknown tokens as rejections."""
        text = config.greedy_text
        ends = bool(text) and text[-1] in self.eos_ids
        if len(text) > config.max_new_tokens or (
            not ends and len(text) < min(config.max_new_tokens, self.target.max_positions - state.prompt_len)
        ):
            raise ValueError(
                f"greedy_text has {len(text)} tokens; it must be the whole greedy output under this config "
                f"(max_new_tokens = {config.max_new_tokens}), ending at an end token if shorter"
            )

    def _known_rest(self, state: _State) -> tuple[int, ...] | None:
        """The known greedy text after the committed tokens, or None. Should the committed text ever
        leave it (a numerical tie the batched verification broke the other way), the text is dropped
        and the look-aheads verify on the target from then on."""
        if state.known is None:
            return None
        g = state.generated
        if tuple(state.ids[state.prompt_len :]) != state.known[:g]:
            state.known = None
            return None
        return state.known[g:]

    def _room(self, state: _State, config: DecodeConfig) -> int:
        """Tokens this round may still commit: none past max_new_tokens nor past the context window."""
        return min(config.max_new_tokens - state.generated, self.target.max_positions - len(state.ids))

    def _truncate(self, tokens: list[int], room: int) -> list[int]:
        """Stop exactly where AR decoding would: after the first EOS, or at max_new_tokens."""
        tokens = tokens[:room]
        for i, t in enumerate(tokens):
            if t in self.eos_ids:
                return tokens[: i + 1]
        return tokens

    def _record(
        self,
        state: _State,
        mode: str,
        outcome: _Outcome,
        times: _Times,
        drafted: _Drafted | None = None,
        tree: _TreeParts | None = None,
    ) -> RoundRecord:
        """The round's one frozen record, from its named parts (an AR step has no drafts and no tree)."""
        drafted = drafted or _Drafted()
        if not self.measures_time:  # a replay: its clock timed no model
            times = dataclasses.replace(times, draft_s=math.nan, policy_s=math.nan, verify_s=math.nan)
        state.seconds += times.draft_s + times.policy_s + times.verify_s
        state.modeled += times.modeled_s
        decision, committed, nodes = outcome.decision, outcome.committed, tree.tree if tree else None
        record = RoundRecord(
            mode=mode,
            round_index=state.rounds,
            start_position=len(state.ids) - len(committed),
            draft_tokens=tuple(int(t) for t in drafted.tokens),
            confidences=tuple(float(q) for q in drafted.confidences),
            draft_sources=tuple(drafted.sources),
            blocks_drafted=int(drafted.blocks),
            policy_steps=decision.steps,
            eps_bounds=tuple(int(e) for e in decision.eps_bounds),
            chosen_length=int(outcome.d),
            accepted=int(outcome.accepted),
            committed_tokens=tuple(int(t) for t in committed),
            bonus_token=None if outcome.bonus_token is None else int(outcome.bonus_token),
            oracle_length=outcome.oracle_d,
            draft_s=float(times.draft_s),
            policy_s=float(times.policy_s),
            verify_s=float(times.verify_s),
            modeled_s=float(times.modeled_s),
            cumulative_tokens=state.generated,
            cumulative_s=state.seconds,
            cumulative_modeled_s=state.modeled,
            alpha=decision.alpha,
            modeled_draft_s=float(times.modeled_draft_s),
            tree_size=0 if nodes is None else len(nodes),
            tree_tokens=() if nodes is None else nodes.tokens,
            tree_parents=() if nodes is None else nodes.parents,
            tree_probs=() if nodes is None else nodes.probs,
            tree_path=tuple(int(j) for j in tree.path) if tree else (),
            tree_confidences=tuple(float(q) for q in tree.confidences) if tree else (),
            oracle_tree_size=outcome.oracle_tree_size,
        )
        state.rounds += 1
        return record


# -- a round's named parts, and its two shapes ----------------------------------------------------


@dataclass(frozen=True)
class _Drafted:
    """What a round drafted and shows: the verified drafts, then the drafter's chain past them."""

    tokens: Sequence[int] = ()
    confidences: Sequence[float] = ()
    sources: Sequence[str] = ()
    blocks: int = 0


@dataclass(frozen=True)
class _Times:
    """A round's measured seconds (NaN in a replay) and its modeled seconds."""

    verify_s: float
    modeled_s: float
    draft_s: float = 0.0
    policy_s: float = 0.0
    modeled_draft_s: float = 0.0


@dataclass(frozen=True)
class _Outcome:
    """What a round decided and committed, and the oracle's hindsight beside it."""

    decision: Decision
    d: int
    accepted: int
    committed: list[int]
    bonus_token: int | None
    oracle_d: int | None = None
    oracle_tree_size: int | None = None


@dataclass(frozen=True)
class _TreeParts:
    """A tree round's tree, its accepted path and the per-depth confidences its policy saw."""

    tree: object
    path: Sequence[int]
    confidences: Sequence[float]


class _Chain:
    """A chain round: the policy reads the buffer, and the first d drafts are verified."""

    def __init__(self, decoder: SpeculativeDecoder, buffer: DraftBuffer):
        self.decoder, self.buffer, self.view = decoder, buffer, buffer
        self._drafts: list[int] = []

    def settle(self, decision: Decision, d: int) -> tuple[Decision, float]:
        return decision, 0.0

    def oracle(self, state, lookahead, sampling, rng, profile) -> tuple[int | None, None]:
        return self.decoder._oracle_length(state, self.buffer, lookahead, sampling, rng, profile)[0], None

    def verify(self, state, d: int, sampling, rng):
        self._drafts, draft_probs = self.buffer.draw(d, rng)
        accepted, bonus, hidden_states = self.decoder._verify_chain(state, self._drafts, draft_probs, sampling, rng)
        return self._drafts[:accepted], bonus, hidden_states

    def rows(self, accepted: int) -> None:
        return None

    def verified(self) -> list[int]:
        return list(self._drafts)

    def modeled_s(self, profile, steps, d: int, context: int) -> float:
        return chain_round_s(profile, steps, d, self.decoder.drafter.needs_features, context)

    def tree_parts(self, accepted: int, q) -> None:
        return None


class _Tree:
    """A tree round: the policy reads the buffer's trees (`TreeView`), and the best-first tree of
    the policy's node budget within depth d is verified under the tree attention mask."""

    def __init__(self, decoder: SpeculativeDecoder, buffer: DraftBuffer, node_budget: int):
        self.decoder, self.buffer = decoder, buffer
        self.view = TreeView(buffer, node_budget)
        self.tree, self._path = None, []

    def settle(self, decision: Decision, d: int) -> tuple[Decision, float]:
        """The tree within depth d (policy time); a cut depth keeps the chosen nodes within it."""
        start = time.perf_counter()
        if d < decision.d and decision.nodes:
            decision = dataclasses.replace(
                decision, nodes=sum(h <= d for h in self.view.tree(decision.d, decision.nodes).depths)
            )
        self.tree = self.view.tree(d, decision.nodes)
        return decision, time.perf_counter() - start

    def oracle(self, state, lookahead, sampling, rng, profile) -> tuple[int, int]:
        return self.decoder._tree_oracle(state, self.view, lookahead, sampling, rng, profile)

    def verify(self, state, d: int, sampling, rng):
        self._path, bonus, hidden_states = self.decoder._verify_tree(state, self.tree, sampling, rng)
        return [self.tree.tokens[j] for j in self._path], bonus, hidden_states

    def rows(self, accepted: int) -> list[int]:
        return [0] + [1 + j for j in self._path[:accepted]]

    def verified(self) -> list[int]:
        return []  # the record shows the chain; the tree's nodes go beside it

    def modeled_s(self, profile, steps, d: int, context: int) -> float:
        return tree_round_s(profile, steps, len(self.tree), self.decoder.drafter.needs_features, context)

    def tree_parts(self, accepted: int, q) -> _TreeParts:
        return _TreeParts(self.tree, self._path[:accepted], q)


def _timed_choice(policy, view, buffer) -> tuple[Decision, float]:
    """The policy's decision on `view` and its own seconds, on a clock that runs while the policy
    decides and stops while the buffer drafts the blocks it asks for (drafting time, the buffer's)."""
    clock = buffer.policy_clock = Stopwatch()
    clock.start()
    try:
        decision = policy.choose_length(view)
    finally:
        clock.stop()
        buffer.policy_clock = None
    return decision, clock.seconds


def end_ids(pair) -> frozenset[int]:
    """The tokens that end a run: the target's EOS ids and the pair's stop ids."""
    return frozenset(pair.target.eos_token_ids) | frozenset(getattr(pair, "stop_ids", ()))


def _replace(record: RoundRecord, **changes) -> RoundRecord:
    return dataclasses.replace(record, **changes)


def remodel_ar(records: list[RoundRecord], profile: LatencyProfile) -> list[RoundRecord]:
    """AR records with the modeled times `profile` gives them (after the profile was re-measured)."""
    out, total = [], 0.0
    for r in records:
        step = profile.ar_token_time(r.start_position)
        total += step
        out.append(_replace(r, modeled_s=step, cumulative_modeled_s=total))
    return out


def race(
    decoder: SpeculativeDecoder, prompt_ids, entries: dict, config: DecodeConfig
) -> Iterator[tuple[str, RoundRecord]]:
    """Decode one prompt in several modes, interleaved round by round.

    entries: label -> (mode, policy), the policy None for modes without one ("ar", "oracle").
    The mode whose measured clock is furthest behind always runs next, so events come out in
    the order of each mode's own measured time: the faster mode finishes first, honestly timed.
    """
    runs = {label: decoder.run(prompt_ids, mode, policy, config) for label, (mode, policy) in entries.items()}
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
