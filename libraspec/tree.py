"""Draft trees from one block-diffusion pass (DDTree, arXiv 2604.12989) and their greedy acceptance.

A block-diffusion pass gives a distribution q_i(.) for every draft position i, conditioned on
the anchor (and, past the first pass, on the drafter's own chosen tokens), not on a path's
tokens. A tree takes several candidates per position: a node at depth i holds one of position
i's candidates, and its root path x_1..x_i has the path probability prod_{j<=i} q_j(x_j).
`build_tree` adds nodes best-first by path probability within a node budget and a depth limit,
so the nodes are the ends of the `budget` most likely root paths (a prefix is at least as likely
as its path, so parents come first).

The target verifies `[last committed token, nodes...]` in one forward with a tree attention mask
(`TargetModel.forward_tree`). Acceptance (`tree_accept`) walks from the root: greedy, along the
child whose token is the target's argmax at its parent, then the argmax after the last accepted
node as the bonus; sampling, by recursive rejection over each node's children (SpecInfer /
EAGLE-2 with deterministic candidates: each child is a proposal with q = 1 on its token), then
the correction from the residual. `tree_oracle` finds the best depth and size in hindsight. A
`TreeView` shows a round's trees to the policies that choose them (tree_policy.py) as per-depth
confidences (`depth_confidences`).
"""

from __future__ import annotations

import functools
import heapq
import itertools
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from .verify import SamplingConfig, probabilities


@dataclass(frozen=True)
class DraftTree:
    """Flattened nodes, parents before children; node j is row j + 1 of the tree verification
    (row 0 is the root, the last committed token)."""

    tokens: tuple[int, ...]  # x of each node
    parents: tuple[int, ...]  # index of each node's parent, -1 for children of the root
    depths: tuple[int, ...]  # 1 for children of the root
    probs: tuple[float, ...]  # q_i(x) of each node: its confidence
    path_probs: tuple[float, ...]  # prod of q along the root path, the node included

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def depth(self) -> int:
        return max(self.depths, default=0)

    @functools.cached_property
    def children(self) -> dict[int, list[int]]:
        """node (-1: the root) -> its children in the order they entered, which is their rank order."""
        out: dict[int, list[int]] = {}
        for j, parent in enumerate(self.parents):
            out.setdefault(parent, []).append(j)
        return out

    def path(self, node: int) -> list[int]:
        """Node indices from the root's child down to `node`."""
        out = []
        while node >= 0:
            out.append(node)
            node = self.parents[node]
        return out[::-1]


def build_tree(candidates: list[tuple[list[int], list[float]]], budget: int) -> DraftTree:
    """The best-first tree over per-position candidates within `budget` nodes.

    candidates[i] = (tokens, probabilities) of draft position i + 1, most likely first and
    distinct; the depth limit is len(candidates). Every node's children are drawn from the next
    position's list, in order, so a node's first child and its next sibling are the only
    nodes that can enter next from it: a heap of those frontier entries gives the exact
    best-first order. Candidates of probability 0 are never added.
    """
    if budget < 1:
        raise ValueError(f"the node budget must be >= 1, got {budget}")
    tokens, parents, depths, probs, path_probs = [], [], [], [], []
    frontier = []  # (-path probability, order offered, rank in the depth's list, parent node, depth)
    order = itertools.count()  # ties go to the entry offered first

    def offer(parent: int, depth: int, rank: int) -> None:
        if depth > len(candidates) or rank >= len(candidates[depth - 1][0]):
            return
        p = float(candidates[depth - 1][1][rank])
        path = p * (path_probs[parent] if parent >= 0 else 1.0)
        if path > 0.0:
            heapq.heappush(frontier, (-path, next(order), rank, parent, depth))

    offer(-1, 1, 0)
    while frontier and len(tokens) < budget:
        neg_path, _, rank, parent, depth = heapq.heappop(frontier)
        tokens.append(int(candidates[depth - 1][0][rank]))
        parents.append(parent)
        depths.append(depth)
        probs.append(float(candidates[depth - 1][1][rank]))
        path_probs.append(-neg_path)
        offer(parent, depth, rank + 1)  # the next sibling
        offer(len(tokens) - 1, depth + 1, 0)  # the first child
    return DraftTree(tuple(tokens), tuple(parents), tuple(depths), tuple(probs), tuple(path_probs))


def tree_walk(tree: DraftTree, child_probs, rng, budget: int | None = None, depth: int | None = None) -> list[int]:
    """The accepted root path (node indices) of the sub-tree of the first `budget` nodes up to `depth`.

    child_probs[j] = p(x_j), the target's probability of node j's token at node j's parent
    (greedy: 1 for the argmax, 0 otherwise); rng the run's `verify.Randomness`, whose round
    uniform u[depth, sibling rank] each test reads, None when greedy. At each node its children are tried in
    rank order: child c is accepted with probability p(c) / (1 - R), R the mass of the
    siblings rejected before it, which is exactly a draw from p restricted to what is left;
    when every child is rejected the walk ends there and the correction comes from p without
    them (`tree_residual`). Every child x_j thus leaves the node with probability p(x_j), and
    the committed tokens are distributed as the target's (docs/ARCHITECTURE.md, "Lossless
    verification"). Since best-first order adds each node's children in rank order, a sub-tree
    of the first b nodes holds a prefix of every node's children and uses the same uniforms.
    """
    budget = len(tree) if budget is None else budget
    depth = tree.depth if depth is None else depth
    path, node = [], -1
    while len(path) < depth:
        rejected, chosen = 0.0, None
        for rank, c in enumerate(tree.children.get(node, ())):
            if c >= budget:
                break
            p = float(child_probs[c])
            left = 1.0 - rejected  # accept c when u * left < p
            if p > 0.0 and (rng is None or left <= 0.0 or rng.below((len(path), rank), p / left)):
                chosen = c
                break
            rejected += p
        if chosen is None:
            break
        path.append(chosen)
        node = chosen
    return path


def tree_residual(tree: DraftTree, probs: torch.Tensor, node: int) -> torch.Tensor:
    """p at `node` (-1: the root) without its children's tokens, renormalised: the correction's
    distribution after every child was rejected (p itself at a leaf). probs (V,) -> (V,)."""
    rejected = [tree.tokens[c] for c in tree.children.get(node, ())]
    residual = probs.clone()
    residual[torch.as_tensor(rejected, dtype=torch.long, device=probs.device)] = 0.0
    total = float(residual.sum())
    return residual / total if total > 0.0 else probs


def target_child_probs(tree: DraftTree, target_logits: torch.Tensor, sampling: SamplingConfig):
    """(child_probs (N,), rows) from the tree verification's logits (N + 1, V), row 0 the root's.

    child_probs[j] is the target's probability of node j's token at its parent; greedy, the
    distribution is the one-hot of the argmax and rows holds the argmax per row (N + 1,);
    sampling, rows holds each row's distribution (N + 1, V) after temperature, top-k, top-p.
    """
    parents = torch.as_tensor(tree.parents, dtype=torch.long) + 1  # (N,) rows of the parents
    tokens = torch.as_tensor(tree.tokens, dtype=torch.long)  # (N,)
    if sampling.greedy:
        rows = target_logits.argmax(dim=-1).cpu()  # (N + 1,)
        return (rows[parents] == tokens).double(), rows
    rows = probabilities(target_logits, sampling)  # (N + 1, V)
    return rows[parents.to(rows.device), tokens.to(rows.device)].cpu(), rows


def text_child_probs(tree: DraftTree, text) -> torch.Tensor:
    """Greedy child_probs (N,) from the target's known greedy text (`text`, the tokens after the
    committed ones) instead of a verification: 1 where node j's token is the text's token at its
    depth and its parent is on the text's path. The target's argmax under a node off that path is
    not known, and no greedy walk reaches such a node, so it reads 0."""
    on_path: list[bool] = []
    for token, parent, depth in zip(tree.tokens, tree.parents, tree.depths):
        on_path.append((parent < 0 or on_path[parent]) and depth <= len(text) and int(token) == int(text[depth - 1]))
    return torch.tensor(on_path, dtype=torch.float64)


def tree_accept(tree: DraftTree, target_logits: torch.Tensor, sampling: SamplingConfig, rng) -> tuple[list[int], int]:
    """target_logits (N + 1, V) -> (accepted node indices root to leaf, bonus / correction token).

    Greedy: the longest root path whose every token is the target's argmax at its parent, then
    the argmax after it (siblings hold distinct tokens, so at most one child matches). Sampling:
    `tree_walk` under the round's uniforms, then a draw from `tree_residual` at the last node.
    """
    child_probs, rows = target_child_probs(tree, target_logits, sampling)
    path = tree_walk(tree, child_probs, None if sampling.greedy else rng)
    end = path[-1] if path else -1
    if sampling.greedy:
        return path, int(rows[end + 1])
    return path, rng.sample(tree_residual(tree, rows[end + 1], end))


def tree_oracle(tree: DraftTree, child_probs, rng, round_time, zero_time: float) -> tuple[int, int]:
    """(depth*, nodes*): the sub-tree that commits the most tokens per modeled second in hindsight.

    Sub-trees are the first b nodes (b = 1..len(tree)) cut at depth h (h = 1..tree.depth);
    each commits len(tree_walk(...)) + 1 tokens in round_time(h, nodes) seconds, where nodes is
    its size; (0, 0), an AR step after the first drafting step, competes at zero_time. Ties go
    to the shallower, then the smaller tree.
    """
    best, best_rate = (0, 0), 1.0 / zero_time
    depths = torch.as_tensor(tree.depths, dtype=torch.long)
    for h in range(1, tree.depth + 1):
        inside = (depths <= h).cumsum(0).tolist()  # nodes of depth <= h among the first b
        seen = set()
        for b in range(1, len(tree) + 1):
            nodes = inside[b - 1]
            if nodes in seen:  # the same sub-tree as a smaller b
                continue
            seen.add(nodes)
            rate = (len(tree_walk(tree, child_probs, rng, b, h)) + 1) / round_time(h, nodes)
            if rate > best_rate * (1.0 + 1e-12):
                best, best_rate = (h, nodes), rate
    return best


def depth_confidences(tree: DraftTree, depth: int) -> list[float]:
    """q_i of a tree for i = 1..depth: the drafter's estimate that the tree accepts a node at depth
    i once it accepted one at depth i - 1, the path mass at depth i over the mass at depth i - 1
    (products of node confidences along paths, as the drafter's independence model has them).
    A chain-shaped tree gives its nodes' own q; depths the tree does not reach get 0. With these
    q, sum_j prod_{k<=j} q_k is the tree's expected accepted length, the quantity Algorithm 1's
    eps_i weigh for a chain."""
    mass = [0.0] * (depth + 1)
    mass[0] = 1.0
    for d, p in zip(tree.depths, tree.path_probs):
        if d <= depth:
            mass[d] += p
    return [min(1.0, mass[i] / mass[i - 1]) if mass[i - 1] > 0.0 else 0.0 for i in range(1, depth + 1)]


class TreeView:
    """A round's trees over one draft buffer, for the depth policy and the engine: n, per-depth
    confidences of the best-first tree of `budget` nodes over every drafted position
    (`depth_confidences`), `extend`, which drafts further steps of the buffer, and `tree(depth)`,
    the tree within a depth. Each position's candidates are read from the buffer once."""

    def __init__(self, buffer, budget: int):
        self.buffer = buffer
        self.n = buffer.n
        self.budget = budget
        self._candidates: list[tuple[list[int], list[float]]] = []
        self._trees: dict[int, DraftTree] = {}

    def tree(self, depth: int, nodes: int | None = None) -> DraftTree:
        """The best-first tree of `budget` nodes (or the first `nodes` of them) within `depth`
        (drafted positions only)."""
        depth = min(depth, len(self.buffer.tokens))
        size = self.budget if nodes is None else min(nodes, self.budget)
        while len(self._candidates) < depth:
            self._candidates.append(self.buffer.candidates(len(self._candidates), self.budget))
        if (depth, size) not in self._trees:
            self._trees[depth, size] = build_tree(self._candidates[:depth], size) if size else _EMPTY
        return self._trees[depth, size]

    @property
    def confidences(self) -> np.ndarray:
        drafted = len(self.buffer.tokens)
        return np.asarray(depth_confidences(self.tree(drafted), drafted), dtype=np.float64)  # (drafted,)

    def extend(self, num_blocks: int) -> None:
        self.buffer.extend(num_blocks)


_EMPTY = DraftTree((), (), (), (), ())


def path_probabilities(parents: Sequence[int], probs: Sequence[float]) -> list[float]:
    """Each node's path probability P_j = prod q along its root path (parents before children)."""
    out: list[float] = []
    for j, parent in enumerate(parents):
        out.append(float(probs[j]) * (out[int(parent)] if parent >= 0 else 1.0))
    return out
