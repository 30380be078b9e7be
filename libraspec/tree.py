"""Draft trees from one block-diffusion pass (DDTree, arXiv 2604.12989) and their greedy acceptance.

A block-diffusion pass gives a distribution q_i(.) for every draft position i, conditioned on
the anchor (and, past the first pass, on the drafter's own chosen tokens), not on a path's
tokens. A tree takes several candidates per position: a node at depth i holds one of position
i's candidates, and its root path x_1..x_i has the path probability prod_{j<=i} q_j(x_j).
`build_tree` adds nodes best-first by path probability within a node budget and a depth limit,
so the nodes are the ends of the `budget` most likely root paths (a prefix is at least as likely
as its path, so parents come first).

The target verifies `[last committed token, nodes...]` in one forward with a tree attention mask
(`TargetModel.forward_tree`). Greedy acceptance (`greedy_tree_accept`) walks from the root along
the child whose token equals the target's argmax at its parent, and takes the target's argmax
after the last accepted node as the bonus token. Tree sampling is not implemented yet.
"""
from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass

import torch


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


def greedy_tree_accept(tree: DraftTree, target_logits: torch.Tensor) -> tuple[list[int], int]:
    """target_logits (N + 1, V), row 0 the root's -> (accepted node indices root to leaf, bonus).

    Accept the longest root path whose every token equals the target's argmax at its parent;
    the bonus is the target's argmax after the last accepted node. Siblings hold distinct
    tokens, so at most one child matches at each step.
    """
    best = target_logits.argmax(dim=-1).cpu().tolist()  # (N + 1,)
    children: dict[int, dict[int, int]] = {}
    for j, (parent, token) in enumerate(zip(tree.parents, tree.tokens)):
        children.setdefault(parent, {})[token] = j
    path, node = [], -1
    while best[node + 1] in children.get(node, {}):
        node = children[node][best[node + 1]]
        path.append(node)
    return path, best[node + 1]


@dataclass(frozen=True)
class TreeShape:
    """ddtree mode's fixed tree: depth limit and node budget (its `policy` in `engine.run`)."""

    depth: int  # deepest node: the drafts of one path (default the drafter's n)
    node_budget: int  # nodes verified besides the root

    def __post_init__(self):
        if self.depth < 1 or self.node_budget < 1:
            raise ValueError(f"a tree needs depth >= 1 and node_budget >= 1, got {self.depth}, {self.node_budget}")

    @property
    def d_max(self) -> int:
        return self.depth
