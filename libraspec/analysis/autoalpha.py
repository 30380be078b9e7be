"""LibraSpec with alpha set online from the latency profile and past rounds (beyond the paper).

Section 3.4 defines the trade-off as alpha = T^verify * tau^-1 * c^-1 and then fixes it
by hand (2.2 for DFlash), because T^verify, tau and c are runtime quantities. Here they
are estimated instead (`theory.auto_alpha`):
- c, the cost per verified position: slope of the profile's linear fit t0 + c k;
- T^verify: the profile's verification time at the running mean of the chosen d
  (d drafts + the last committed token);
- tau: the running mean of tokens committed per round, with `prior_tau` counted as one
  pseudo-round so the first rounds (and round 0) have a value.
alpha is clamped to `alpha_range`; a profile whose fit has c <= 0 (verification no
dearer with length) gives the upper end, the limit alpha -> infinity of the formula.
Algorithm 1 itself is unchanged (`LibraSpecPolicy`); only alpha moves between rounds.
(`tree_policy.PricedTreePolicy`, mode ddtree-priced, prices a tree's nodes the same way, node by node.)
"""

from __future__ import annotations

import math

from libraspec.analysis.theory import auto_alpha
from libraspec.cost import LatencyProfile
from libraspec.policy import LibraSpecPolicy
from libraspec.records import RoundRecord
from libraspec.spec import ALPHA_RANGE

DEFAULT_PRIOR_TAU = 2.0  # one pseudo-round: a drafter that gets about one draft accepted


class AutoAlphaLibraSpecPolicy(LibraSpecPolicy):
    """Algorithm 1 with alpha = T^verify(mean d) / (mean tau * c), re-estimated after every round."""

    name = "libraspec-auto"

    def __init__(
        self,
        profile: LatencyProfile,
        d_max: int,
        prior_tau: float = DEFAULT_PRIOR_TAU,
        alpha_range: tuple[float, float] = ALPHA_RANGE,
    ):
        if not isinstance(profile, LatencyProfile):
            raise ValueError("automatic alpha needs a measured LatencyProfile")
        if not (isinstance(prior_tau, (int, float)) and math.isfinite(prior_tau) and prior_tau >= 1):
            raise ValueError(f"prior_tau must be a number >= 1 (tau counts the bonus token), got {prior_tau!r}")
        low, high = alpha_range
        if not (0 < low <= high and math.isfinite(high)):
            raise ValueError(f"alpha_range must satisfy 0 < low <= high < inf, got {alpha_range!r}")
        self.profile = profile
        self.prior_tau = float(prior_tau)
        self.alpha_range = (float(low), float(high))
        self._taus: list[int] = []
        self._lengths: list[int] = []
        super().__init__(self.estimate(), d_max)

    def mean_tau(self) -> float:
        """Running mean tau with the prior as one pseudo-round."""
        return (self.prior_tau + sum(self._taus)) / (1 + len(self._taus))

    def mean_length(self) -> int:
        """Running mean of the chosen d (n before any round), rounded, at least 1."""
        if not self._lengths:
            return self.profile.n
        return max(1, round(sum(self._lengths) / len(self._lengths)))

    def estimate(self) -> float:
        """alpha = T^verify(mean d) / (mean tau * c) (section 3.4), clamped to alpha_range."""
        low, high = self.alpha_range
        try:
            alpha = auto_alpha(self.profile, self.mean_tau(), self.mean_length())
        except ValueError:
            return high  # c <= 0: no cost per position, alpha unbounded
        return min(max(alpha, low), high)

    def update(self, record: RoundRecord) -> None:
        """Add the round's tau and d to the running means and re-estimate alpha."""
        if record.chosen_length > 0:
            self._taus.append(record.tau)
            self._lengths.append(record.chosen_length)
            self.alpha = self.estimate()

    def reset(self) -> None:
        super().reset()
        self._taus, self._lengths = [], []
        self.alpha = self.estimate()
