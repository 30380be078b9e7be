"""Exact output distributions of the real engine, by enumerating every random outcome.

`Branching` stands in for `verify.Randomness` (the engine's only source of random numbers when
sampling, `SpeculativeDecoder.randomness`). Each random call is a choice point whose branches
carry their exact probabilities:
- `below(key, t)`, an acceptance test u < t: u is uniform on an interval that earlier tests of the
  same key in the round have narrowed, so the two branches have the interval's shares below and
  above t (the oracle's look-ahead and the verification read one u per key, as the real source);
- `draw(key, probs)`, a draft drawn from its proposal: one branch per token of positive
  probability, the same token for every later draw of the key in the round;
- `sample(probs)`: one branch per token of positive probability.

`enumerate_round` runs one round once per leaf of that tree (a script of choices replays the
path to a leaf), and `output_distribution` chains rounds, memoised on the committed tokens and
the policy's state, into the exact distribution of the whole output. Nothing is sampled: the
result is a sum of products of the engine's own probabilities, so it equals the target's
distribution to rounding when verification is lossless (tests/test_exact_sampling.py).
"""

from __future__ import annotations

from collections import defaultdict

import torch

from libraspec.engine import DecodeConfig


class Branching:
    """Random numbers replayed from `script` (choice indices); new choice points take branch 0."""

    def __init__(self, script: list[int]):
        self.script = list(script)
        self.choices: list[int] = []  # the branch taken at every choice point so far
        self.arity: list[int] = []  # how many branches each had
        self.weight = 1.0  # the probability of the path taken
        self._interval: dict = {}
        self._drawn: dict = {}

    def start_round(self, length: int, width: int = 1) -> None:
        self._interval, self._drawn = {}, {}

    def _choose(self, branches: list[tuple[object, float]]):
        branches = [(value, p) for value, p in branches if p > 0.0]
        k = len(self.choices)
        pick = self.script[k] if k < len(self.script) else 0
        if len(branches) > 1:
            self.choices.append(pick)
            self.arity.append(len(branches))
        value, p = branches[pick if len(branches) > 1 else 0]
        self.weight *= p
        return value

    def below(self, key, threshold: float) -> bool:
        key = key if isinstance(key, tuple) else (key, 0)
        lo, hi = self._interval.get(key, (0.0, 1.0))
        if threshold >= hi:
            return True
        if threshold <= lo:
            return False
        width = hi - lo
        below = self._choose([(True, (threshold - lo) / width), (False, (hi - threshold) / width)])
        self._interval[key] = (lo, threshold) if below else (threshold, hi)
        return below

    def draw(self, key: int, probs: torch.Tensor) -> int:
        row = probs.double().cpu()
        if key in self._drawn:
            token, seen = self._drawn[key]
            assert torch.equal(seen, row), "one key drawn from two distributions in a round"
            return token
        token = self._choose(_branches(row))
        self._drawn[key] = (token, row)
        return token

    def sample(self, probs: torch.Tensor) -> int:
        return self._choose(_branches(probs.double().cpu()))


def _branches(row: torch.Tensor) -> list[tuple[int, float]]:
    """(token, probability) for every token of positive probability in `row` (V,), renormalised."""
    tokens = row.nonzero().view(-1)
    return list(zip(tokens.tolist(), (row[tokens] / row.sum()).tolist()))


def enumerate_round(run_once) -> dict:
    """{outcome: probability} over every leaf; run_once(rng) runs one round with `rng` and returns
    a hashable outcome."""
    out: dict = defaultdict(float)
    stack = [[]]
    while stack:
        script = stack.pop()
        rng = Branching(script)
        out[run_once(rng)] += rng.weight
        for k in range(len(script), len(rng.arity)):
            stack.extend(rng.choices[:k] + [alt] for alt in range(1, rng.arity[k]))
    return dict(out)


def output_distribution(
    decoder,
    prompt: list[int],
    mode: str,
    make_policy,
    max_new_tokens: int,
    sampling: dict,
    state_of=lambda policy: None,
    observe=None,
) -> dict[tuple, float]:
    """{output tokens: probability} of decoding `prompt` in `mode`, exactly.

    Each round is the engine's first round on the committed tokens as its prompt (the caches equal
    a rebuild from the committed tokens, tests/test_engine.py), with the policy from
    `make_policy(state)`, state None first and then `state_of(policy)` after the round (G4's length);
    `observe` sees every round's record.
    """
    memo: dict = {}

    def rest(ids: tuple, left: int, state) -> dict:
        if left == 0:
            return {(): 1.0}
        key = (ids, left, state)
        if key in memo:
            return memo[key]
        config = DecodeConfig(max_new_tokens=left, **sampling)

        def run_once(rng):
            decoder.randomness = lambda seed: rng
            policy = make_policy(state)
            record = next(decoder.run(list(ids), mode, policy, config))
            if observe is not None:
                observe(record)
            done = record.finished and (record.committed_tokens[-1] in decoder.eos_ids)
            return record.committed_tokens, done, None if policy is None else state_of(policy)

        dist: dict = defaultdict(float)
        for (committed, done, after), p in enumerate_round(run_once).items():
            tail = {(): 1.0} if done else rest(ids + committed, left - len(committed), after)
            for more, p_more in tail.items():
                dist[committed + more] += p * p_more
        memo[key] = dict(dist)
        return memo[key]

    return rest(tuple(prompt), max_new_tokens, None)


def total_variation(a: dict, b: dict) -> float:
    return 0.5 * sum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b))
