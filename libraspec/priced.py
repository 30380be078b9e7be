"""LibraSpec that knows its price: the marginal criterion with alpha read off the latency profile that
prices the run's rounds (mode libraspec-priced; docs/ARCHITECTURE.md, "Alpha from the price list").

Section 3.4 of the paper (../shared/seeds/000_78869ffaed7ba478.txt) absorbs three runtime
quantities into one trade-off, alpha = T^verify tau^-1 c^-1, and then fixes it by hand (2.2 for
DFlash). Eq. 17 reads: extend to d' while the segment's expected accepted tokens S_i, each worth
the seconds a committed token costs on average (T / tau), pay for the d' - i drafts at c seconds
each. Here both sides come from this project's price list (cost.py), the one that prices the
rounds (the engine's and replay's `modeled_s`), as `tree_policy.PricedTreePolicy` (ddtree-priced) does
node by node:

- V = T / tau, the modeled seconds a committed token is worth: the earlier rounds' `modeled_s`
  over their committed tokens (AR steps included), with one prior pseudo-round that drafts one
  block-diffusion pass, verifies the first block (d = n, `cost.chain_round_s` after the profile's
  own context) and commits `prior_tau` tokens;
- c, the price of one more verified draft near the length the run runs at: with d the last
  speculative round's length (n before any), L the context the coming round starts from (the
  previous round's start position plus its tau; the profile's own context before any round) and
  R(d) = `cost.chain_round_s(profile, steps(d), d, needs_features, L)` (ceil(d / n) drafting steps,
  verify_time(d + 1, L), the upkeep),

      c = (R(d + n) - R(d)) / n,

  the mean of the marginal prices of the n drafts after d: verify_time(k + 1, L) - verify_time(k, L)
  for each, plus the one drafting step the window crosses (a window of n drafts always crosses
  exactly one block boundary), spread over the n drafts it brings. The step is priced as the
  drafter of the last round's last drafted token ran it (`RoundRecord.draft_sources`; a
  block-diffusion pass before any round): a look-up step costs `lookup_s`, a pass what the next
  pass costs in `draft_time`.

alpha = V / c is computed before each round from earlier records only and recorded in
`Decision.alpha`: section 3.4's T / (tau c), read off the price list (on a linear profile t0 + c k
with look-up drafting, lookup_s = 0, exactly that). It is reported, not used: the rule below reads
V and the price list's own marginal prices directly, which is the marginal criterion at that alpha
without averaging c over d.

**The rule is the marginal criterion at that price, not Algorithm 1's bound.** Algorithm 1's
eps_i = floor(alpha S_i + i) lets the conditional segment sum S_i (every draft before i assumed
accepted: the paper's "strengthened" criterion, Theorem 3.3) pay for d' - i drafts, so d grows
about linearly in alpha; T / (tau c) is the threshold of the one-draft marginal criterion
(Theorem 3.5: extend while alpha P_{d+1} >= 1, P the unconditional survival q_1 ... q_{d+1}). With
this CPU's flat verification alpha = V / c is 18-42, and Algorithm 1 there drafts 5-7 tokens
where 2-3 pay (docs/ARCHITECTURE.md, "Alpha from the price list", has the numbers). So this policy
applies the marginal criterion with the price list's own marginal prices: it verifies

    d = argmax_{1 <= d <= d_max} ( V * sum_{j <= d} P_j  -  R(d) ),   P_j = q_1 ... q_j,

the expected value of the round's accepted drafts, each worth V seconds, less the round's modeled
seconds R(d) (every drafting step the round ran, at least those d needs: a drafted block is paid
whatever d, as the engine prices it; verify_time(d + 1, L); the upkeep); ties go to the shorter
d. On a linear price list without drafting costs that is Theorem 3.5's rule (extend while
P_{d+1} V >= c, P falling), and the pass a block crossing costs is paid only where the block's
drafts earn it. A further block is drafted only while it could still win: with every later P at
most the last drafted one, some m = 1..n more drafts must be worth more than they cost. A hybrid
round's later steps are priced as its last one.

In lock-step the mode's group form, `group.PricedGroup`, applies the same criterion to the group's
round, priced as lock-step charges it (padded or ragged).
"""

from __future__ import annotations

import math

import numpy as np

from .checks import check_buffer, check_confidences, check_int
from .cost import DIFFUSION, LatencyProfile, chain_round_s
from .policy import Decision, DraftBufferLike, LibraSpecPolicy
from .records import RoundRecord

DEFAULT_PRIOR_TAU = 2.0  # the prior pseudo-round commits one accepted draft and the bonus (as ddtree-priced's)


class PricedLibraSpecPolicy(LibraSpecPolicy):
    """The marginal criterion at alpha = V / c, priced by the latency profile, from the run's earlier
    rounds (module docstring); a `LibraSpecPolicy` whose alpha is set each round."""

    name = "libraspec-priced"

    def __init__(
        self,
        profile: LatencyProfile,
        d_max: int,
        needs_features: bool = True,
        prior_tau: float = DEFAULT_PRIOR_TAU,
        prior_s: float | None = None,
        length: int | None = None,
        context: int | None = None,
        source: str = DIFFUSION,
    ):
        """`needs_features`: whether the drafter's upkeep follows each round (it prices the prior's
        round; in c it cancels). The last four are the state a fresh policy continues from
        (`prior_now`): the prior pseudo-round's tokens and seconds, the length the run runs at, the
        context the next round starts from and the drafter of the last drafting step."""
        if not isinstance(profile, LatencyProfile):
            raise ValueError("a priced LibraSpec needs the LatencyProfile that prices its rounds")
        if not (isinstance(prior_tau, (int, float)) and math.isfinite(prior_tau) and prior_tau >= 1):
            raise ValueError(f"prior_tau must be a number >= 1 (tau counts the bonus token), got {prior_tau!r}")
        self.profile, self.needs_features = profile, bool(needs_features)
        self.prior_tau = float(prior_tau)
        first = chain_round_s(profile, [DIFFUSION], profile.n, self.needs_features)  # one pass, n + 1 verified
        self.prior_s = first if prior_s is None else float(prior_s)
        if not (math.isfinite(self.prior_s) and self.prior_s > 0):
            raise ValueError(f"prior_s must be a finite time > 0, got {prior_s!r}")
        self._prior_state = (check_int(profile.n if length is None else length, "length"), context, str(source))
        self._reset_state()
        super().__init__(self._alpha(), d_max)

    def _reset_state(self) -> None:
        self._seconds, self._tokens = 0.0, 0
        self._length, self._context, self._source = self._prior_state

    def value_s(self) -> float:
        """V: modeled seconds per committed token of the rounds so far, with the prior pseudo-round."""
        return (self.prior_s + self._seconds) / (self.prior_tau + self._tokens)

    def draft_price_s(self) -> float:
        """c: (R(d + n) - R(d)) / n at the current length d and context (module docstring)."""
        d, n = self._length, self.profile.n
        return (self.round_s(d + n) - self.round_s(d)) / n

    def round_s(self, d: int, blocks: int = 0) -> float:
        """R(d): this round's modeled seconds verifying d drafts after drafting `blocks` blocks (at
        least those d needs), its steps priced as the last drafter's."""
        steps = [self._source] * max(1, int(blocks), -(-int(d) // self.profile.n))
        return chain_round_s(self.profile, steps, int(d), self.needs_features, self._context)

    def choose_length(self, buffer: DraftBufferLike) -> Decision:
        n, _ = check_buffer(buffer)
        value = self.value_s()
        while True:
            # every drafted block is paid, whatever d: the best d over the drafted confidences
            q = check_confidences(buffer.confidences)[: self.d_max]
            blocks = len(buffer.confidences) // n
            P = np.cumprod(q)  # (drafted,) survivals P_1..P_D
            net = value * np.cumsum(P) - [self.round_s(d, blocks) for d in range(1, len(q) + 1)]
            best_d = int(np.argmax(net)) + 1  # the first of equal values: ties to the shorter d
            D = len(q)
            if D >= self.d_max:
                break
            # one block more only while some m of its drafts, each surviving at most P_D, could make
            # a round worth more than the best one drafted now (every d then pays the new pass)
            room = min(n, self.d_max - D)
            bound = max(value * (P.sum() + m * P[-1]) - self.round_s(D + m, blocks + 1) for m in range(1, room + 1))
            if bound <= net[best_d - 1]:
                break
            buffer.extend(1)
        return Decision(best_d, alpha=self.alpha)

    def _alpha(self) -> float:
        # a flat price list (a free draft) makes alpha unbounded: Algorithm 1 then runs to d_max
        return self.value_s() / max(self.draft_price_s(), 1e-9)

    def prior_now(self) -> tuple:
        """(needs_features, prior_tau, prior_s, length, context, source): the arguments after
        (profile, d_max) of a fresh policy that continues this one (a run cut in rounds)."""
        return (
            self.needs_features,
            self.prior_tau + self._tokens,
            self.prior_s + self._seconds,
            self._length,
            self._context,
            self._source,
        )

    def update(self, record: RoundRecord) -> None:
        """Add the round's modeled seconds and committed tokens to V; a speculative round sets the
        length and the drafting step c is priced at; the next round starts after this one's tokens."""
        self._seconds += record.modeled_s
        self._tokens += record.tau
        self._context = record.start_position + record.tau
        if record.chosen_length > 0:
            self._length = int(record.chosen_length)
            if record.draft_sources:
                self._source = record.draft_sources[-1]
        self.alpha = self._alpha()

    def reset(self) -> None:
        """Back to the prior: no rounds, the prior length, context and drafter."""
        self._reset_state()
        self.alpha = self._alpha()
