"""The policies that choose a round's draft tree (tree.py holds the trees, their acceptance and
their oracle): `TreePolicy` lets a length policy (static, or LibraSpec's Algorithm 1) choose the
depth from the tree's per-depth confidences and fills a node budget within it;
`MarginalTreePolicy` and `PricedTreePolicy` choose the tree node by node by marginal gain
(docs/ARCHITECTURE.md, "Trees that choose their nodes"). Each sees the round through a
`tree.TreeView`.
"""

from __future__ import annotations

import math
from typing import Iterable

from .checks import check_alpha, check_int
from .cost import DIFFUSION, LatencyProfile, chain_round_s, tree_row_prices
from .policy import Decision
from .tree import TreeView, path_probabilities


class MarginalTreePolicy:
    """Each round's tree chosen node by node by marginal gain (docs/ARCHITECTURE.md, "Trees that choose their nodes").

    Nodes enter in best-first order, so node j's path probability P_j = prod q along its root path
    never rises from one node to the next. Node j is the drafter's estimate of one more accepted
    token with probability P_j (the tree's expected accepted length is sum_j P_j) and costs one more
    verified row, about c seconds (the paper's cost per position). With alpha = T / (tau c) (the
    paper's trade-off: the seconds a committed token is worth, T / tau, in units of c), node j pays
    when alpha * P_j >= 1; the tree is the longest best-first prefix that pays, within `node_cap`
    nodes and depth d_max. A drafting step more is taken while the deepest paying node sits at the
    last drafted position (every deeper node has a smaller P, so none could pay otherwise). On a
    chain (one candidate per position) P_i = prod_{k<=i} q_k and the rule submits d = the last i
    with alpha * P_i >= 1: Theorem 3.2's beneficial adjustment applied one position at a time.
    Everything it reads is the drafter's distributions, never a sampled draft, so sampling stays
    lossless."""

    name = "tree-marginal"

    def __init__(self, alpha: float, d_max: int, node_cap: int):
        self.alpha = check_alpha(alpha)
        self.d_max = check_int(d_max, "d_max")
        self.node_budget = check_int(node_cap, "node cap")

    def choose_length(self, view: "TreeView") -> Decision:
        while True:
            drafted = min(len(view.buffer.tokens), self.d_max)
            tree = view.tree(drafted)
            keep = 0
            while keep < len(tree) and self.pays(keep, tree.path_probs[keep]):
                keep += 1
            deepest = max(tree.depths[:keep], default=0)
            if deepest < drafted or drafted >= self.d_max or len(view.buffer.tokens) > drafted:
                return Decision(deepest, alpha=self.alpha, nodes=keep)
            view.extend(1)

    def pays(self, j: int, path_prob: float) -> bool:
        """Whether the j-th node (0-based, best-first) with path probability P pays: alpha * P >= 1."""
        return self.alpha * path_prob >= 1.0

    def reason(self, j: int, path_prob: float) -> str:
        """Why the j-th node enters or not, in the rule's own terms (the inspector's tree view)."""
        gain = self.alpha * path_prob
        return f"alpha * P = {gain:.2f} {'>=' if gain >= 1.0 else '<'} 1: {'pays' if gain >= 1.0 else 'does not pay'}"

    def update(self, record) -> None:
        """The rule keeps no state across rounds."""

    def reset(self) -> None:
        """The rule keeps no state across rounds."""


def node_reasons(policy: MarginalTreePolicy, earlier: Iterable, record) -> list[str]:
    """Why each node of `record`'s tree entered, in the rule of `policy` (a fresh ddtree-marginal or
    ddtree-priced policy), its state first brought to the round by the run's `earlier` rounds (the
    priced rule's V). Node j is priced as the j-th of the verified tree: in a round whose room cut
    the depth that can differ from its index in the tree the rule chose from."""
    policy.reset()
    for past in earlier:
        policy.update(past)
    return [policy.reason(j, p) for j, p in enumerate(path_probabilities(record.tree_parents, record.tree_probs))]


class PricedTreePolicy(MarginalTreePolicy):
    """Mode ddtree-priced: ddtree-marginal's rule with each node priced by the latency profile.

    Node j pays when P_j * V >= dT_j. V = (T_prior + sum T_r) / (prior_tau + sum tau_r) is the time
    a committed token is worth: the modeled seconds per committed token so far, every round counted
    (AR steps too), the prior one pseudo-round that verifies a first block and commits `prior_tau`
    tokens. dT_j = T_tree(j + 2) - T_tree(j + 1) is the profile's price of the row node j adds (root
    and j nodes before it); where verification does not grow the node is free and pays. With
    dT_j = c for every j the rule is alpha * P_j >= 1 at alpha = V / c = T / (tau c), section 3.4's
    alpha, so the trade-off follows the profile: a steep cost per token asks more of each node.
    `alpha` (what the records show) is V over the mean dT_j of the cap's nodes.

    Limits, as for ddtree-marginal: nodes enter as a best-first prefix (the first node that does not
    pay ends the tree, even if a later row were cheaper); the drafting steps the rule asks for are
    not priced; the prior's drafting is one block-diffusion pass whatever the drafter; dT_0 compares a
    one-node tree forward with the one-token chain forward."""

    name = "tree-priced"

    def __init__(
        self, profile: LatencyProfile, d_max: int, node_cap: int, prior_tau: float = 2.0, prior_s: float | None = None
    ):
        if not isinstance(profile, LatencyProfile):
            raise ValueError("a priced tree needs a LatencyProfile")
        if not (isinstance(prior_tau, (int, float)) and math.isfinite(prior_tau) and prior_tau >= 1):
            raise ValueError(f"prior_tau must be a number >= 1 (tau counts the bonus token), got {prior_tau!r}")
        cap = check_int(node_cap, "node cap")
        self.profile, self.prior_tau = profile, float(prior_tau)
        # the prior pseudo-round: a first block verified (or `prior_s`, e.g. the rounds so far)
        first = chain_round_s(profile, [DIFFUSION], profile.n, needs_features=False)  # one pass, n + 1 verified
        self.prior_s = first if prior_s is None else float(prior_s)
        self.row_costs = tree_row_prices(profile, cap)  # dT_j, j = 0 .. cap - 1
        self._seconds, self._tokens = 0.0, 0
        super().__init__(self._alpha(), d_max, cap)

    def value_s(self) -> float:
        """V: modeled seconds per committed token so far, with the prior pseudo-round."""
        return (self.prior_s + self._seconds) / (self.prior_tau + self._tokens)

    def prior_now(self) -> tuple[float, float]:
        """(prior_tau, prior_s) of a fresh policy that continues this one's V (a run cut in rounds)."""
        return self.prior_tau + self._tokens, self.prior_s + self._seconds

    def _alpha(self) -> float:
        mean = sum(self.row_costs) / len(self.row_costs)
        return self.value_s() / max(mean, 1e-9)  # a flat profile: every node free, alpha huge

    def pays(self, j: int, path_prob: float) -> bool:
        return path_prob * self.value_s() >= self.row_costs[min(j, len(self.row_costs) - 1)]

    def reason(self, j: int, path_prob: float) -> str:
        gain, cost = 1e3 * path_prob * self.value_s(), 1e3 * self.row_costs[min(j, len(self.row_costs) - 1)]
        paid = self.pays(j, path_prob)
        return f"P * V = {gain:.2f} ms {'>=' if paid else '<'} dT = {cost:.2f} ms: {'pays' if paid else 'does not pay'}"

    def update(self, record) -> None:
        """Add the round's modeled seconds and committed tokens to V."""
        self._seconds += record.modeled_s
        self._tokens += record.tau
        self.alpha = self._alpha()

    def reset(self) -> None:
        self._seconds, self._tokens = 0.0, 0
        self.alpha = self._alpha()


class TreePolicy:
    """A tree mode's policy: a length policy picks the depth from the tree's per-depth
    confidences (it is handed a `TreeView`), and the tree fills `node_budget` nodes within that
    depth (docs/ARCHITECTURE.md, "Modes"). ddtree's depth policy is a static length,
    ddtree-libraspec's is Algorithm 1."""

    def __init__(self, depth_policy, node_budget: int):
        if isinstance(node_budget, bool) or int(node_budget) != node_budget or node_budget < 1:
            raise ValueError(f"the node budget must be an integer >= 1, got {node_budget!r}")
        self.depth_policy = depth_policy
        self.node_budget = int(node_budget)
        self.name = f"tree-{depth_policy.name}"

    @property
    def d_max(self) -> int:
        return self.depth_policy.d_max

    def choose_length(self, view: TreeView):
        return self.depth_policy.choose_length(view)

    def update(self, record) -> None:
        self.depth_policy.update(record)

    def reset(self) -> None:
        self.depth_policy.reset()
