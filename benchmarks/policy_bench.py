"""Micro-benchmark: LibraSpecPolicy.choose_length (O(d) bounds) vs a naive O(d^2) Algorithm 1.

Run from the repository root: `python benchmarks/policy_bench.py`. Confidences are
random decaying curves q_i = sigmoid(a - b i + noise), typical and confident ones
(n = 15, alpha = 2.2); both
implementations see the same buffers and must make identical decisions (d, tokens
drafted, iterations). Prints median microseconds per decision, their ratio, and the
fraction of a 120 ms round (one CPU verification of 16 tokens, measured when the
embedded drafter was first trained; assets/TRAINING.md).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from libraspec.analysis.stepper import ArrayBuffer  # noqa: E402
from libraspec.policy import Decision, LibraSpecPolicy  # noqa: E402
from libraspec.records import PolicyStep  # noqa: E402

ROUND_S = 0.120  # a CPU verification round of 16 tokens (assets/TRAINING.md)


class NaiveLibraSpec:
    """Algorithm 1 with eps_i as the literal double sum of products (line 6), O(d^2) each."""

    def __init__(self, alpha: float, d_max: int):
        self.alpha, self.d_max = alpha, d_max

    def eps_star(self, q: np.ndarray, d: int) -> int:
        bounds = []
        for i in range(1, d + 1):
            s = sum(math.prod(q[i - 1 : j]) for j in range(i, d + 1))
            bounds.append(math.floor(self.alpha * s + i + 1e-9))
        return min(bounds)

    def choose_length(self, buffer: ArrayBuffer) -> Decision:
        n = buffer.n
        d, budget, steps = n, len(buffer.confidences) - n, []
        while d < self.d_max:
            eps = self.eps_star(buffer.confidences.tolist(), d)
            if eps <= d:
                steps.append(PolicyStep(d, eps, eps, budget + d - eps, 0, True))
                d = eps
                break
            d_new = min(eps, self.d_max)
            budget -= d_new - d
            blocks = 0
            if budget < 0:
                blocks = math.ceil(-budget / n)
                buffer.extend(blocks)
                budget += blocks * n
            steps.append(PolicyStep(d, eps, d_new, budget, blocks, False))
            d = d_new
        return Decision(d, tuple(steps))


SCENARIOS = {  # (range of a, range of b) in q_i = sigmoid(a - b i + noise)
    "decaying": ((1.0, 5.0), (0.03, 0.4)),  # typical: d mostly within one or two blocks
    "confident": ((6.0, 10.0), (0.01, 0.08)),  # long easy spans: d grows towards d_max
}


def decaying_confidences(rng: np.random.Generator, length: int, scenario: str) -> np.ndarray:
    (a_lo, a_hi), (b_lo, b_hi) = SCENARIOS[scenario]
    a, b = rng.uniform(a_lo, a_hi), rng.uniform(b_lo, b_hi)
    logits = a - b * np.arange(1, length + 1) + rng.normal(0.0, 0.8, length)
    return 1.0 / (1.0 + np.exp(-logits))  # (length,)


def time_policy(policy, cases, n: int) -> tuple[list[float], list[tuple]]:
    times, decisions = [], []
    for q in cases:
        buffer = ArrayBuffer.revealing(q, n, 1)
        start = time.perf_counter()
        decision = policy.choose_length(buffer)
        times.append(time.perf_counter() - start)
        decisions.append((decision.d, len(buffer.confidences), decision.steps))
    return times, decisions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2000)
    parser.add_argument("--naive-repeats", type=int, default=300)
    parser.add_argument("--alpha", type=float, default=2.2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    n = 15
    print(f"n={n} alpha={args.alpha} repeats={args.repeats} (naive {args.naive_repeats})")
    for scenario, d_max in ((s, d) for s in SCENARIOS for d in (24, 60)):
        rng = np.random.default_rng(args.seed)
        blocks = -(-d_max // n)
        cases = [decaying_confidences(rng, blocks * n, scenario) for _ in range(args.repeats)]
        fast_t, fast_dec = time_policy(LibraSpecPolicy(args.alpha, d_max), cases, n)
        naive_t, naive_dec = time_policy(NaiveLibraSpec(args.alpha, d_max), cases[: args.naive_repeats], n)
        if fast_dec[: args.naive_repeats] != naive_dec:
            raise SystemExit(f"{scenario} d_max={d_max}: the two implementations disagree")
        fast, naive = statistics.median(fast_t), statistics.median(naive_t)
        lengths = [dec[0] for dec in fast_dec]
        iters = [len(dec[2]) for dec in fast_dec]
        print(
            f"{scenario:9s} d_max={d_max}: O(d) {fast * 1e6:.1f} us, naive O(d^2) {naive * 1e6:.1f} us, "
            f"ratio {naive / fast:.1f}x, O(d) = {fast / ROUND_S:.2e} of a 120 ms round "
            f"(mean d {np.mean(lengths):.1f}, mean iterations {np.mean(iters):.2f}, "
            f"identical decisions on {len(naive_dec)} buffers)"
        )


if __name__ == "__main__":
    main()
