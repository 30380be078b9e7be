"""Expected acceptance and speedup; the paper's theorems as functions (sections 3.2-3.4, App. A).

Symbols: p_i is the probability that draft i is accepted given drafts 1..i-1 were
(the drafter confidence q_i stands in for it under Assumption 3.7); d the speculative
length; tau_d = accepted drafts + 1 bonus token, so E[tau_d] = 1 + sum_{j=1..d} prod_{k<=j} p_k
(Eq. 13-14 with prefix acceptance); eta_d the speedup over autoregressive decoding;
c the verification cost per position; alpha = T^verify tau^-1 c^-1 (section 3.4).

Two objectives, chosen by the `cost` argument:
- a `LatencyProfile`: Eq. 1, E[eta_d] = E[tau_d] * T_ar / (T^draft_d + T^verify_d), with
  the profile's round time (ceil(d / n) blocks drafted, d + 1 tokens verified);
- a callable T(d) > 0, the time to verify d drafts: Eq. 2, the drafting-free setting,
  E[eta_d] proportional to E[tau_d] / T(d).

Convergence (Theorems 3.5-3.6). Let the objective be E[tau_d] / T(d) with T(d) > 0 and
non-decreasing marginal costs c_d = T(d) - T(d-1) >= 0 (affine T(d) = t0 + c d with t0 > 0,
c >= 0 is the paper's case; any convex non-decreasing T works). Then for any p in
[0, 1]^d_max (no monotonicity of p needed: the prefix products P_j = prod_{k<=j} p_k never
increase) the objective rises strictly up to its first maximiser and never rises after a
non-improving step: E[tau_{d+1}] / T(d+1) is the mediant of E[tau_d] / T(d) and
P_{d+1} / c_{d+1}. So the neighbour rule of `iterate_beneficial` stops at a global
maximiser over 1..d_max. With a profile the same holds when drafting costs the same for
every d <= d_max (block_size >= d_max) and verification is convex; a concave verification
curve (as measured on CPUs) or per-block drafting steps can break unimodality, and the
iteration can then stop at a local maximum.
"""

from __future__ import annotations

from typing import Callable, Union

import numpy as np

from libraspec.cost import BLOCK_DIFFUSION, Drafting, LatencyProfile
from libraspec.policy import check_acceptance, expected_accepted

Cost = Union[LatencyProfile, Callable[[int], float]]


def expected_tau_curve(p, d_max: int) -> np.ndarray:
    """E[tau_d] = 1 + E[accepted_d] for d = 1..d_max."""
    p = check_acceptance(p, d_max)
    return 1.0 + np.cumsum(np.cumprod(p[:d_max]))  # (d_max,)


def expected_speedup(p, d: int, profile: LatencyProfile, drafting: Drafting = BLOCK_DIFFUSION) -> float:
    """E[eta_d] = (1 + E[accepted_d]) * T_ar / T_round(d) (Eq. 1, tau with the bonus token), the round
    drafting as `drafting` says (`LatencyProfile.round_time`)."""
    if d < 1:
        raise ValueError(f"d must be >= 1, got {d}")
    return (1.0 + expected_accepted(p, d)) * profile.ar_token_time() / profile.round_time(d, drafting)


def objective_curve(p, cost: Cost, d_max: int, drafting: Drafting = BLOCK_DIFFUSION) -> np.ndarray:
    """The objective for d = 1..d_max: Eq. 1 for a profile (rounds drafting as `drafting` says),
    E[tau_d] / T(d) (Eq. 2) otherwise."""
    if isinstance(d_max, bool) or not isinstance(d_max, (int, np.integer)) or d_max < 1:
        raise ValueError(f"d_max must be an integer >= 1, got {d_max!r}")
    tau = expected_tau_curve(p, d_max)
    if isinstance(cost, LatencyProfile):
        times = np.array([cost.round_time(d, drafting) for d in range(1, d_max + 1)]) / cost.ar_token_time()
    elif callable(cost):
        times = np.array([float(cost(d)) for d in range(1, d_max + 1)])
    else:
        raise ValueError("cost must be a LatencyProfile or a callable d -> verify seconds")
    if not np.all(np.isfinite(times)) or np.any(times <= 0):
        raise ValueError("costs must be finite and > 0 for every d")
    return tau / times  # (d_max,)


def expected_speedup_curve(p, profile: LatencyProfile, d_max: int, drafting: Drafting = BLOCK_DIFFUSION) -> np.ndarray:
    """E[eta_d] for d = 1..d_max under the profile (Eq. 1), rounds drafting as `drafting` says."""
    if not isinstance(profile, LatencyProfile):
        raise ValueError("expected_speedup_curve needs a LatencyProfile")
    return objective_curve(p, profile, d_max, drafting)


def exhaustive_argmax(p, cost: Cost, d_max: int, drafting: Drafting = BLOCK_DIFFUSION) -> int:
    """argmax_{d=1..d_max} of the objective, ties to the shorter d."""
    values = objective_curve(p, cost, d_max, drafting)
    return int(np.argmax(values)) + 1


def _verify_fn(cost: Cost) -> Callable[[int], float]:
    if isinstance(cost, LatencyProfile):
        return lambda d: cost.verify_time(d + 1)  # d drafts + the last committed token
    if callable(cost):
        return cost
    raise ValueError("verify_time must be a LatencyProfile or a callable d -> seconds")


def is_beneficial(p, d: int, d_new: int, verify_time: Cost) -> bool:
    """Definition 3.1 in the drafting-free setting (Eq. 2): E[tau_d'] / T(d') > E[tau_d] / T(d).

    `verify_time` is T(d), seconds to verify d drafts (a profile gives verify_time(d + 1)).
    """
    if d < 1 or d_new < 1:
        raise ValueError(f"lengths must be >= 1, got d={d}, d_new={d_new}")
    t = _verify_fn(verify_time)
    tau, tau_new = 1 + expected_accepted(p, d), 1 + expected_accepted(p, d_new)
    return tau_new / t(d_new) > tau / t(d)


def marginal_benefit(p, d: int, d_new: int, verify_time: Cost) -> tuple[float, float]:
    """Theorem 3.2 (Eq. 4): (E[tau_{d:d'}] / T_{d:d'}, E[tau_d] / T_d) for d != d'.

    The adjustment is beneficial iff the first exceeds the second when extending
    (d < d'), and iff it falls below it when truncating (d > d'). Needs T(d) != T(d').
    """
    if d == d_new:
        raise ValueError("Theorem 3.2 compares two different lengths")
    t = _verify_fn(verify_time)
    lo, hi = sorted((d, d_new))
    gain = expected_accepted(p, hi) - expected_accepted(p, lo)  # E[tau_{lo:hi}]
    cost = t(hi) - t(lo)  # T_{lo:hi}
    if cost <= 0:
        raise ValueError("marginal verification cost must be > 0")
    return gain / cost, (1 + expected_accepted(p, d)) / t(d)


def iterate_beneficial(p, d0: int, cost: Cost, d_max: int) -> list[int]:
    """Theorem 3.6 by single beneficial adjustments between neighbours; returns the path.

    Rule: from d, move to d + 1 if that strictly improves the objective (Eq. 1 for a
    profile, Eq. 2 for a callable), else to d - 1 if that strictly improves it, else
    stop. Each move is a single beneficial adjustment (Definition 3.1), so the objective
    rises strictly and the path ends. See the module docstring for when the end point
    is a global maximiser.
    """
    values = objective_curve(p, cost, d_max)
    if not 1 <= d0 <= d_max:
        raise ValueError(f"d0 must lie in [1, {d_max}], got {d0}")
    path = [int(d0)]
    d = int(d0)
    while True:
        if d < d_max and values[d] > values[d - 1]:
            d += 1
        elif d > 1 and values[d - 2] > values[d - 1]:
            d -= 1
        else:
            return path
        path.append(d)


def alpha_from_costs(verify_time: float, tau: float, c: float) -> float:
    """alpha = T^verify * tau^-1 * c^-1 (section 3.4)."""
    for name, value in (("verify_time", verify_time), ("tau", tau), ("c", c)):
        if not (np.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be finite and > 0, got {value}")
    return float(verify_time) / (float(tau) * float(c))


def auto_alpha(profile: LatencyProfile, tau_mean: float, length: int) -> float:
    """alpha from a measured profile and the running mean tau.

    T^verify is the profile's time to verify `length` drafts (e.g. the running mean of
    chosen d), c the slope of `profile.linear_fit()`. A flat or falling profile has no
    positive c: alpha would be unbounded, so that raises ValueError.
    """
    if length < 1:
        raise ValueError(f"length must be >= 1, got {length}")
    _, c = profile.linear_fit()
    if c <= 0:
        raise ValueError("verification cost does not grow with length: alpha is unbounded")
    return alpha_from_costs(profile.verify_time(int(length) + 1), tau_mean, c)
