"""Draft trees (ddtree and ddtree-libraspec): best-first construction, tree verification equal to
chain verification, greedy output equal to AR for every drafter and shape, exact caches after
every round, the tree walk and the tree oracle. Tree sampling is proved exactly in
tests/test_exact_sampling.py and tested statistically in tests/test_sampling.py."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from decoding import check_caches, generated, run, with_drafter
from fake_drafters import GreedyOracleDrafter, PartlyRightModule

from libraspec.analysis.stepper import ArrayBuffer
from libraspec.cost import LatencyProfile
from libraspec.engine import SpeculativeDecoder
from libraspec.models.registry import tiny_pair
from libraspec.models.target import keep_rows, tree_visibility
from libraspec.modes import MODES, make_policy
from libraspec.policy import StaticPolicy, epsilon_bounds
from libraspec.spec import RunSpec
from libraspec.tree import DraftTree, build_tree, depth_confidences, tree_accept, tree_oracle, tree_walk
from libraspec.tree_policy import TreePolicy
from libraspec.verify import Randomness, SamplingConfig

LAYER = "unit"  # tests/conftest.py

torch.set_num_threads(1)
# float64 models, but transformers computes rotary cos / sin in float32, whose kernels round
# differently for different sequence shapes: a fresh forward differs from a cached one by ~1e-8
CLOSE = dict(rtol=1e-6, atol=1e-6)
# tree verifications timed apart from chain forwards (cheaper here), as a measured profile has them
PROFILE = dataclasses.replace(
    LatencyProfile.from_linear(t0=0.05, c=0.004, draft_per_block=0.01, n=7, max_tokens=40),
    tree_rows=(2, 9, 17, 33),
    tree_verify_s=(0.052, 0.07, 0.09, 0.15),
)


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def pair(request):
    return tiny_pair(request.param, seed=3, dtype=torch.float64)


GREEDY = SamplingConfig()


def tree_run(decoder, prompt, depth=None, budget=32, mode="ddtree", **cfg):
    return run(decoder, prompt, mode, make_policy(mode, decoder.n, tree_depth=depth, node_budget=budget), **cfg)


def prompts(pair, count: int):
    gen = torch.Generator().manual_seed(11)
    return [
        torch.randint(3, pair.target.vocab_size, (int(4 + 3 * i % 17),), generator=gen).tolist() for i in range(count)
    ]


# -- construction ---------------------------------------------------------------------------------

CANDIDATES = [
    ([10, 11, 12], [0.5, 0.3, 0.2]),  # position 1
    ([20, 21], [0.9, 0.1]),  # position 2
    ([30, 31], [0.6, 0.4]),
]  # position 3


def test_best_first_order_by_path_probability():
    tree = build_tree(CANDIDATES, budget=100)
    assert list(tree.path_probs) == sorted(tree.path_probs, reverse=True)
    assert (tree.tokens[:4], tree.parents[:4]) == ((10, 20, 11, 30), (-1, 0, -1, 1))
    assert tree.path_probs[:4] == pytest.approx([0.5, 0.45, 0.3, 0.27])
    assert len(tree) == 3 + 3 * 2 + 3 * 2 * 2  # every path of every length
    for j in range(len(tree)):
        path = tree.path(j)
        assert all(tree.parents[k] < k for k in path)  # parents before children
        assert tree.depths[j] == len(path)
        assert (
            tree.probs[j] == CANDIDATES[tree.depths[j] - 1][1][CANDIDATES[tree.depths[j] - 1][0].index(tree.tokens[j])]
        )
        assert tree.path_probs[j] == pytest.approx(float(torch.tensor([tree.probs[k] for k in path]).prod()))


def test_budget_and_depth_limits():
    for budget in (1, 2, 5, 9):
        tree = build_tree(CANDIDATES, budget)
        assert len(tree) == budget
        assert tree.path_probs == build_tree(CANDIDATES, 100).path_probs[:budget]  # the best `budget` nodes
    assert build_tree(CANDIDATES[:1], 100).tokens == (10, 11, 12) and build_tree(CANDIDATES[:1], 100).depth == 1
    assert build_tree(CANDIDATES[:2], 100).depth == 2
    assert build_tree([([1, 2], [1.0, 0.0])], 10).tokens == (1,)  # probability 0 is never added
    assert len(build_tree([], 10)) == 0
    with pytest.raises(ValueError, match="budget"):
        build_tree(CANDIDATES, 0)
    with pytest.raises(ValueError, match="static length"):
        TreePolicy(StaticPolicy(0), 4)
    with pytest.raises(ValueError, match="node budget"):
        TreePolicy(StaticPolicy(3), 0)


def test_greedy_acceptance_walks_the_matching_path():
    tree = build_tree(CANDIDATES, budget=100)
    V = 40
    logits = torch.zeros(len(tree) + 1, V)
    want = {-1: 11, tree.tokens.index(11): 21}  # root -> 11 -> 21 -> (no child 32): bonus 32
    node_21 = next(j for j in range(len(tree)) if tree.tokens[j] == 21 and tree.parents[j] == tree.tokens.index(11))
    want[node_21] = 32
    for node, token in want.items():
        logits[node + 1, token] = 1.0
    path, bonus = tree_accept(tree, logits, GREEDY, None)
    assert [tree.tokens[j] for j in path] == [11, 21] and bonus == 32
    assert tree_accept(DraftTree((), (), (), (), ()), logits[:1], GREEDY, None) == ([], 11)


def test_the_worked_tree_of_the_architecture_guide():
    """docs/ARCHITECTURE.md, "A worked tree": the nodes, the positions, the mask and the walk it states."""
    a, b, c, d, e, f = 1, 2, 3, 4, 5, 6  # d: a candidate no node of 5 or 6 takes
    candidates = [([a, b], [0.6, 0.3]), ([c, d], [0.7, 0.2]), ([e, f], [0.9, 0.05])]
    tree = build_tree(candidates, 5)
    assert (tree.tokens, tree.parents, tree.depths) == ((a, c, e, b, c), (-1, 0, 1, -1, 3), (1, 2, 3, 1, 2))
    assert tree.path_probs == pytest.approx([0.6, 0.42, 0.378, 0.3, 0.21])
    bigger = build_tree(candidates, 6)
    assert (bigger.tokens[5], bigger.parents[5], bigger.path_probs[5]) == (e, 4, pytest.approx(0.189))
    x = True
    assert tree_visibility(tree.parents).tolist() == [
        [x, 0, 0, 0, 0, 0],
        [x, x, 0, 0, 0, 0],
        [x, x, x, 0, 0, 0],
        [x, x, x, x, 0, 0],
        [x, 0, 0, 0, x, 0],
        [x, 0, 0, 0, x, x],
    ]
    logits = torch.zeros(len(tree) + 1, 8)  # greedy: the target's argmax after the root is b, after b c
    for row, token in ((0, b), (4, c), (5, f)):
        logits[row, token] = 1.0
    path, bonus = tree_accept(tree, logits, GREEDY, None)
    assert (path, bonus) == ([3, 4], f) and [0] + [1 + j for j in path] == [0, 4, 5]  # the rows kept


def test_the_worked_record_of_the_architecture_guide():
    """docs/ARCHITECTURE.md, "A round's record, worked": the golden round it reads, and its bounds."""
    from golden import load

    record = load("tiny")["right2/T0/p0/libraspec"][0]
    assert epsilon_bounds([0.7] * 7, 2.2).tolist() == [5, 6, 7, 7, 8, 8, 8]
    assert record["policy_steps"] == [[7, 5, 5, 2, 0, True]] and record["chosen_length"] == 5
    assert record["eps_bounds"] == epsilon_bounds([0.7] * 5, 2.2).tolist() == [5, 5, 6, 6, 6]
    assert (record["accepted"], record["bonus_token"], record["committed_tokens"]) == (2, 84, [84, 84, 84])
    assert record["oracle_length"] == 2 and record["blocks_drafted"] == 1 and record["start_position"] == 5
    assert record["modeled_s"] == pytest.approx(0.01 + 0.05 + 6 * 0.004)


# -- verification ---------------------------------------------------------------------------------


def chain_logits(target, ids):
    return target.forward(target.new_cache(), ids, with_hidden=False).logits  # (T, V)


@pytest.mark.parametrize("shape", ["chain", "wide", "deep"])
def test_tree_forward_equals_chain_verification(pair, shape):
    """Every node's logits equal those of a plain causal forward over the prefix and its root
    path (additive 4-D mask, DynamicCache, both architectures, SDPA and eager)."""
    target = pair.target
    prefix = prompts(pair, 1)[0]
    gen = torch.Generator().manual_seed(2)
    depth, width = {"chain": (6, 1), "wide": (1, 12), "deep": (5, 3)}[shape]
    candidates = [
        (
            torch.randperm(target.vocab_size, generator=gen)[:width].tolist(),
            sorted(torch.rand(width, generator=gen).tolist(), reverse=True),
        )
        for _ in range(depth)
    ]
    tree = build_tree(candidates, budget=20)
    for impl in ("sdpa", "eager"):
        target.model.set_attn_implementation(impl)
        try:
            cache = target.new_cache()
            target.forward(cache, prefix[:-1], with_hidden=False)
            out = target.forward_tree(cache, prefix[-1], tree.tokens, tree.parents, tree.depths, with_hidden=False)
        finally:
            target.model.set_attn_implementation("sdpa")
        assert cache.get_seq_length() == len(prefix) + len(tree)
        torch.testing.assert_close(out.logits[0], chain_logits(target, prefix)[-1], **CLOSE)
        for j in range(len(tree)):
            ids = prefix + [tree.tokens[k] for k in tree.path(j)]
            torch.testing.assert_close(out.logits[j + 1], chain_logits(target, ids)[-1], **CLOSE)
        if shape == "chain":  # a chain-shaped tree is exactly the chain verification
            torch.testing.assert_close(
                out.logits, chain_logits(target, prefix + list(tree.tokens))[len(prefix) - 1 :], **CLOSE
            )


def test_keep_rows_leaves_the_accepted_path_in_place(pair):
    target = pair.target
    prefix = prompts(pair, 1)[0]
    tree = build_tree([([40, 41, 42], [0.5, 0.3, 0.2]), ([50, 51], [0.6, 0.4]), ([60], [1.0])], budget=12)
    cache = target.new_cache()
    target.forward(cache, prefix[:-1], with_hidden=False)
    target.forward_tree(cache, prefix[-1], tree.tokens, tree.parents, tree.depths, with_hidden=False)
    leaf = max(range(len(tree)), key=lambda j: (tree.depths[j], j))
    path = tree.path(leaf)
    P = len(prefix) - 1
    keep_rows(cache, P, [P] + [P + 1 + j for j in path])
    fresh = target.new_cache()
    target.forward(fresh, prefix + [tree.tokens[j] for j in path], with_hidden=False)
    assert cache.get_seq_length() == fresh.get_seq_length() == len(prefix) + len(path)
    for have, want in zip(cache.layers, fresh.layers):
        torch.testing.assert_close(have.keys, want.keys, **CLOSE)
        torch.testing.assert_close(have.values, want.values, **CLOSE)
    with pytest.raises(ValueError, match="ascending"):
        keep_rows(cache, P, [P + 2, P + 1])


# -- decoding -------------------------------------------------------------------------------------


def drafters(pair):
    return {
        "random": pair.drafter,
        "right": GreedyOracleDrafter(pair.target, block_size=8),
        "right2": GreedyOracleDrafter(pair.target, block_size=8, right_for=2, confidence=0.7),
        "runner-up": GreedyOracleDrafter(pair.target, block_size=8, confidence=0.9, runner_up=(0, 3)),
        "partly": PartlyRightModule(pair, 2),
    }


SHAPES = {"chain": (7, 7), "wide": (1, 32), "default": (None, 32), "deep": (20, 40), "small": (3, 4)}


def test_greedy_ddtree_equals_ar(pair):
    """Every drafter and shape; each round's modeled time is its drafting, one verification of the
    tree and the upkeep."""
    for name, drafter in drafters(pair).items():
        decoder = SpeculativeDecoder(with_drafter(pair, drafter), PROFILE)
        for prompt in prompts(pair, 3):
            reference = generated(run(decoder, prompt, "ar", None, max_new_tokens=24))
            for shape, (depth, budget) in SHAPES.items():
                records = tree_run(decoder, prompt, depth, budget, max_new_tokens=24)
                assert generated(records) == reference, (name, shape)
                for r in records:
                    assert r.mode == "ddtree" and r.tree_size <= budget and r.chosen_length <= (depth or 7)
                    assert r.accepted <= r.chosen_length and r.tau <= r.accepted + 1
                    assert r.modeled_s == pytest.approx(
                        PROFILE.draft_time(r.blocks_drafted) + PROFILE.tree_verify_time(r.tree_size + 1) + PROFILE.fit_s
                    )


def test_a_tree_accepts_what_the_chain_misses(pair):
    """The target's token ranks second at positions 1 and 4: chains stop there, a tree does not."""
    drafter = GreedyOracleDrafter(pair.target, block_size=8, confidence=0.9, runner_up=(0, 3))
    decoder = SpeculativeDecoder(with_drafter(pair, drafter), PROFILE)
    prompt = prompts(pair, 1)[0]
    chain = run(decoder, prompt, "static", make_policy("static", 7), max_new_tokens=40)
    tree = tree_run(decoder, prompt, 7, 32, max_new_tokens=40)
    assert all(r.accepted == 0 for r in chain[:-1])
    assert all(r.accepted == 7 and r.tree_size == 32 and r.chosen_length == 7 for r in tree[:-1])
    assert generated(tree) == generated(chain)


def test_caches_hold_exactly_the_committed_path(pair):
    """After every round the target cache equals a fresh prefill of the committed tokens minus
    the newest, and the drafter context equals one rebuilt from them (gathered, not recomputed)."""
    decoder = SpeculativeDecoder(with_drafter(pair, PartlyRightModule(pair, 2)), PROFILE)
    random = SpeculativeDecoder(pair, PROFILE)
    checked = [check_caches(decoder, tolerance=CLOSE["atol"]), check_caches(random, tolerance=CLOSE["atol"])]
    records = []
    for shape, (depth, budget) in SHAPES.items():
        records += tree_run(decoder, prompts(pair, 1)[0], depth, budget, max_new_tokens=16)
        records += tree_run(random, prompts(pair, 1)[0], depth, budget, max_new_tokens=6)
    for budget in (4, 32):  # Algorithm 1's depths, greedy and sampled
        records += tree_run(decoder, prompts(pair, 1)[0], None, budget, mode="ddtree-libraspec", max_new_tokens=16)
        records += tree_run(
            decoder,
            prompts(pair, 1)[0],
            None,
            budget,
            mode="ddtree-libraspec",
            max_new_tokens=16,
            temperature=1.0,
            seed=budget,
        )
        records += tree_run(
            random, prompts(pair, 1)[0], 7, budget, max_new_tokens=8, temperature=1.0, annotate_oracle=True
        )
    assert all(checked) and sum(map(len, checked)) >= len(records)  # every round was checked
    assert sum(1 for r in records if r.tree_path) > 10  # gathered paths, not only the root


def test_eos_and_max_new_tokens_inside_a_path(pair):
    drafter = GreedyOracleDrafter(pair.target, block_size=8, confidence=0.9, runner_up=(0,))
    prompt = prompts(pair, 2)[1]
    plain = SpeculativeDecoder(with_drafter(pair, drafter), PROFILE)
    free = generated(run(plain, prompt, "ar", None, max_new_tokens=30))
    stop = free[4]  # the 5th generated token stops the text, inside the first round's path
    decoder = SpeculativeDecoder(with_drafter(pair, drafter, frozenset({stop})), PROFILE)
    reference = free[: free.index(stop) + 1]
    for depth, budget in SHAPES.values():
        records = tree_run(decoder, prompt, depth, budget, max_new_tokens=30)
        assert generated(records) == reference and records[-1].finished
    for limit in (1, 2, 5, 10, 17):
        for depth, budget in SHAPES.values():
            records = tree_run(plain, prompt, depth, budget, max_new_tokens=limit)
            assert generated(records) == free[:limit] and records[-1].cumulative_tokens == limit


def test_the_context_window_stops_ddtree_where_ar_stops(pair):
    drafter = GreedyOracleDrafter(pair.target, block_size=8, confidence=0.9, runner_up=(1,))
    decoder = SpeculativeDecoder(with_drafter(pair, drafter), PROFILE)
    window = pair.target.max_positions
    for room in (1, 2, 3, 9):
        prompt = (prompts(pair, 1)[0] * window)[: window - room]
        reference = generated(run(decoder, prompt, "ar", None, max_new_tokens=20))
        for depth, budget in SHAPES.values():
            records = tree_run(decoder, prompt, depth, budget, max_new_tokens=20)
            assert generated(records) == reference and records[-1].finished, (room, depth, budget)
    with pytest.raises(ValueError, match="context window"):
        tree_run(decoder, [5, 6], depth=10_000)


def test_tree_modes_need_a_policy(pair):
    decoder = SpeculativeDecoder(pair, PROFILE)
    for mode in ("ddtree", "ddtree-libraspec"):
        with pytest.raises(ValueError, match="needs a policy"):
            run(decoder, [5, 6], mode, None)


def test_greedy_ddtree_libraspec_equals_ar_and_lets_algorithm_1_choose_the_depth(pair):
    """LibraSpec picks the depth from the chain's confidences (extending by blocks, rolling back);
    the tree fills the budget within it. Output equals AR for every drafter."""
    depths, steps = set(), set()
    for name, drafter in drafters(pair).items():
        decoder = SpeculativeDecoder(with_drafter(pair, drafter), PROFILE)
        for prompt in prompts(pair, 2):
            reference = generated(run(decoder, prompt, "ar", None, max_new_tokens=24))
            for budget in (4, 32):
                policy = make_policy("ddtree-libraspec", decoder.n, alpha=2.2, d_max=24, node_budget=budget)
                records = run(decoder, prompt, "ddtree-libraspec", policy, max_new_tokens=24)
                assert generated(records) == reference, (name, budget)
                for r in records:
                    chain = make_policy("libraspec", decoder.n, alpha=2.2, d_max=24)
                    want = chain.choose_length(
                        ArrayBuffer(r.tree_confidences[: decoder.n], decoder.n, r.tree_confidences[decoder.n :])
                    )
                    assert len(r.tree_confidences) == len(r.confidences) == r.blocks_drafted * decoder.n
                    room = 24 - (r.cumulative_tokens - r.tau)  # tokens the round could still commit
                    assert r.policy_steps == want.steps and r.chosen_length == min(want.d, room - 1)
                    assert (
                        r.tree_size <= budget
                        and max((len(_path(r, j)) for j in range(r.tree_size)), default=0) <= r.chosen_length
                    )
                    depths.add(r.chosen_length)
                    steps.update(s.rollback for s in r.policy_steps)
    assert len(depths) > 2 and steps == {True, False}  # several depths, extensions and rollbacks


def test_ddtree_marginal_verifies_only_nodes_that_pay(pair):
    """ddtree-marginal: every node verified has alpha * P >= 1 (P its path probability), rounds whose
    room cut the depth included; greedy output equals AR; and its trees differ from fixed-budget
    ddtree's in most rounds."""
    from libraspec.tree_policy import MarginalTreePolicy

    class Spy(MarginalTreePolicy):  # pairs each round's chosen depth with the depth it verified
        def reset(self):
            self.pairs, self.pending = [], None

        def choose_length(self, view):
            decision = super().choose_length(view)
            self.pending = decision.d
            return decision

        def update(self, record):
            if self.pending is not None:
                self.pairs.append((self.pending, record.chosen_length))
            self.pending = None

    alpha, cap, cut, rounds, differ = 3.0, 12, 0, 0, 0
    for name, drafter in drafters(pair).items():
        decoder = SpeculativeDecoder(with_drafter(pair, drafter), PROFILE)
        for prompt in prompts(pair, 2):
            reference = generated(run(decoder, prompt, "ar", None, max_new_tokens=20))
            policy = Spy(alpha, 24, cap)
            records = run(decoder, prompt, "ddtree-marginal", policy, max_new_tokens=20)
            cut += sum(chosen > verified for chosen, verified in policy.pairs)  # the room cut the depth
            fixed = tree_run(decoder, prompt, budget=cap, max_new_tokens=20)
            assert generated(records) == reference == generated(fixed), name
            for r in records:
                path_p = [float(np.prod([r.tree_probs[j] for j in _path(r, k)])) for k in range(r.tree_size)]
                assert all(alpha * p >= 1 - 1e-12 for p in path_p), (name, r.round_index, path_p)
            rounds += min(len(records), len(fixed))
            differ += sum(a.tree_size != b.tree_size for a, b in zip(records, fixed))
    assert cut  # some round's depth was cut by its room
    assert differ > rounds / 2, (differ, rounds)
    rule = make_policy("ddtree-marginal", 7, alpha=3.0, d_max=24, node_budget=cap)
    assert rule.reason(0, 0.5) == "alpha * P = 1.50 >= 1: pays"
    assert rule.reason(4, 0.2) == "alpha * P = 0.60 < 1: does not pay"


def test_a_profile_priced_tree_pays_each_node_its_own_row_cost(pair):
    """ddtree-priced (`PricedTreePolicy`): node j enters while P_j * V >= dT_j, V the modeled seconds per
    committed token so far (a prior pseudo-round first) and dT_j the profile's price of its row
    (tree timings: rows cost different amounts); greedy output equals AR. On a linear profile it is
    the fixed rule alpha * P >= 1 at alpha = V / c."""
    from libraspec.tree_policy import MarginalTreePolicy, PricedTreePolicy, node_reasons

    cap = 12
    drafter = GreedyOracleDrafter(pair.target, block_size=8, confidence=0.9, runner_up=(0, 3))
    decoder = SpeculativeDecoder(with_drafter(pair, drafter), PROFILE)
    policy = make_policy("ddtree-priced", decoder.n, PROFILE, d_max=24, node_budget=cap)
    assert isinstance(policy, PricedTreePolicy)
    costs = [max(PROFILE.tree_verify_time(k + 1) - PROFILE.tree_verify_time(k), 0.0) for k in range(1, cap + 1)]
    assert policy.row_costs == pytest.approx(costs) and len(set(round(c, 9) for c in costs)) > 1
    prior = PROFILE.verify_time(decoder.n + 1) + PROFILE.draft_time(1)
    assert policy.value_s() == pytest.approx(prior / 2.0)
    verified = 0
    for prompt in prompts(pair, 2):
        reference = generated(run(decoder, prompt, "ar", None, max_new_tokens=20))
        records = run(decoder, prompt, "ddtree-priced", policy, max_new_tokens=20)
        assert generated(records) == reference
        seconds = tokens = 0.0
        for r in records:
            value = (prior + seconds) / (2.0 + tokens)  # V before this round
            path_p = [float(np.prod([r.tree_probs[j] for j in _path(r, k)])) for k in range(r.tree_size)]
            assert all(p * value >= costs[j] - 1e-12 for j, p in enumerate(path_p)), (r.round_index, path_p)
            seconds, tokens, verified = seconds + r.modeled_s, tokens + r.tau, verified + r.tree_size
        assert policy.value_s() == pytest.approx((prior + seconds) / (2.0 + tokens))
    assert verified > 0
    continued = PricedTreePolicy(PROFILE, 24, cap, *policy.prior_now())  # how the exact tests cut a run in rounds
    assert continued.value_s() == pytest.approx(policy.value_s())
    # the inspector's reasons: the rule with V as the round found it (the last run's rounds)
    last = next(r for r in reversed(records) if r.tree_size)
    earlier = [r for r in records if r.round_index < last.round_index]
    value = (prior + sum(r.modeled_s for r in earlier)) / (2.0 + sum(r.tau for r in earlier))
    path_p = [float(np.prod([last.tree_probs[j] for j in _path(last, k)])) for k in range(last.tree_size)]
    reasons = node_reasons(PricedTreePolicy(PROFILE, 24, cap), earlier, last)
    settings = RunSpec(d_max=24, node_budget=cap).checked(decoder.n).spec
    assert MODES["ddtree-priced"].node_reasons(settings, PROFILE, earlier, last) == reasons  # the race's view
    assert MODES["ddtree"].node_reasons(settings, PROFILE, earlier, last) is None  # no rule node by node
    assert reasons == [
        f"P * V = {1e3 * p * value:.2f} ms >= dT = {1e3 * costs[j]:.2f} ms: pays" for j, p in enumerate(path_p)
    ]
    for j, p in ((0, 0.9), (5, 0.3), (11, 0.01)):  # the inspector's words follow the rule
        assert policy.reason(j, p).endswith(": pays") == policy.pays(j, p)
        assert f"dT = {1e3 * costs[j]:.2f} ms" in policy.reason(j, p)
    linear = LatencyProfile.from_linear(t0=0.05, c=0.004, draft_per_block=0.01, n=7, max_tokens=40)
    auto = PricedTreePolicy(linear, 24, cap)
    fixed = MarginalTreePolicy(auto.value_s() / 0.004, 24, cap)
    for j, p in enumerate(np.linspace(0.01, 1.0, 60)):
        assert auto.pays(j % cap, p) == fixed.pays(j % cap, p) or abs(p * auto.value_s() - 0.004) < 1e-12


def _path(record, node):
    out = []
    while node >= 0:
        out.append(node)
        node = record.tree_parents[node]
    return out[::-1]


def test_records_carry_the_tree_and_its_accepted_path(pair):
    drafter = GreedyOracleDrafter(pair.target, block_size=8, confidence=0.9, runner_up=(0, 3))
    decoder = SpeculativeDecoder(with_drafter(pair, drafter), PROFILE)
    for mode in ("ddtree", "ddtree-libraspec"):
        for r in tree_run(decoder, prompts(pair, 1)[0], 7, 12, mode=mode, max_new_tokens=30):
            assert len(r.tree_tokens) == len(r.tree_parents) == len(r.tree_probs) == r.tree_size
            assert all(p < j for j, p in enumerate(r.tree_parents))
            assert (
                len(r.tree_path) == r.accepted and list(r.tree_path) == _path(r, r.tree_path[-1])
                if r.tree_path
                else r.accepted == 0
            )
            assert [r.tree_tokens[j] for j in r.tree_path][: r.tau] == list(r.committed_tokens[: r.accepted])


def test_depth_confidences_are_the_trees_conditional_path_mass():
    tree = build_tree(CANDIDATES, budget=100)  # every path: the mass at depth i is prod of each position's sum
    assert depth_confidences(tree, 3) == pytest.approx([1.0, 1.0, 1.0])
    tree = build_tree(CANDIDATES, budget=4)  # 10, 20 (0.45), 11 (0.3), 30 (0.27)
    assert depth_confidences(tree, 4) == pytest.approx([0.8, 0.45 / 0.8, 0.27 / 0.45, 0.0])
    chain = build_tree([(t[:1], q[:1]) for t, q in CANDIDATES], budget=100)
    assert depth_confidences(chain, 3) == pytest.approx([0.5, 0.9, 0.6])  # a chain: its own q_i


# -- the walk and the oracle ----------------------------------------------------------------------


def test_the_walk_tries_siblings_with_the_mass_left():
    """Child c is accepted when u (1 - R) < p(c), R the mass of the siblings rejected before it."""
    tree = build_tree(CANDIDATES, budget=100)
    first = tree.children[-1]  # 10, 11, 12
    probs = torch.zeros(len(tree), dtype=torch.float64)
    probs[first[0]], probs[first[1]], probs[first[2]] = 0.2, 0.3, 0.1
    u = torch.full((3, 3), 0.99, dtype=torch.float64)
    u[0, 0], u[0, 1] = 0.5, 0.3  # 0.5 >= 0.2 rejects 10; 0.3 * 0.8 = 0.24 < 0.3 accepts 11
    assert tree_walk(tree, probs, Randomness.given(u)) == [first[1]]
    u[0, 1] = 0.4  # 0.32 >= 0.3 rejects 11; 0.99 * 0.5 >= 0.1 rejects 12: the walk ends at the root
    assert tree_walk(tree, probs, Randomness.given(u)) == []
    assert tree_walk(tree, probs, Randomness.given(u), budget=1) == []
    deep = torch.ones(len(tree), dtype=torch.float64)
    assert len(tree_walk(tree, deep, None)) == 3 and len(tree_walk(tree, deep, None, depth=2)) == 2
    assert tree_walk(tree, deep, None, budget=2) == [0, 1]  # the first two nodes: 10 -> 20


def test_tree_oracle_is_the_best_sub_tree_by_brute_force():
    gen = torch.Generator().manual_seed(5)
    for trial in range(20):
        cands = [
            (list(range(10 * i, 10 * i + 3)), sorted(torch.rand(3, generator=gen).tolist(), reverse=True))
            for i in range(4)
        ]
        tree = build_tree(cands, budget=int(torch.randint(1, 30, (1,), generator=gen)))
        child = (torch.rand(len(tree), generator=gen) < 0.4).double()
        u = Randomness.given(torch.rand(5, 30, generator=gen, dtype=torch.float64)) if trial % 2 else None

        def times(h, nodes):
            return 1.0 + 0.3 * (h > 3) + 0.05 * nodes  # a second block past depth 3

        depth, nodes = tree_oracle(tree, child, u, times, zero_time=0.9)
        rates = {(0, 0): 1 / 0.9}
        for b in range(1, len(tree) + 1):
            for h in range(1, tree.depth + 1):
                size = sum(1 for j in range(b) if tree.depths[j] <= h)
                rates.setdefault((h, size), (len(tree_walk(tree, child, u, b, h)) + 1) / times(h, size))
        best = max(rates.values())
        assert rates[(depth, nodes)] == pytest.approx(best)
        assert (depth, nodes) == min(k for k, v in rates.items() if v >= best * (1 - 1e-12))


def test_annotation_gives_every_tree_round_a_hindsight_depth_and_size(pair):
    drafter = GreedyOracleDrafter(pair.target, block_size=8, right_for=2, confidence=0.7)
    decoder = SpeculativeDecoder(with_drafter(pair, drafter), PROFILE)
    prompt = prompts(pair, 1)[0]
    plain = tree_run(decoder, prompt, 7, 8, max_new_tokens=24)
    for mode in ("ddtree", "ddtree-libraspec"):
        records = tree_run(decoder, prompt, 7, 8, mode=mode, max_new_tokens=24, annotate_oracle=True)
        assert generated(records) == generated(plain)
        assert all(r.oracle_length is not None and r.oracle_tree_size is not None for r in records[:-1])
        # the drafter is right for two tokens: a longer path never commits more, so d* <= 2
        assert {r.oracle_length for r in records[:-1]} <= {0, 1, 2} and max(r.oracle_length for r in records) >= 1


def test_annotation_leaves_a_sampled_tree_run_unchanged(pair):
    """The look-ahead tree and its oracle are untimed and draw no random numbers of the run's."""
    decoder = SpeculativeDecoder(pair, PROFILE)
    prompt = prompts(pair, 1)[0]
    for mode in ("ddtree", "ddtree-libraspec"):
        plain = tree_run(decoder, prompt, 7, 8, mode=mode, max_new_tokens=20, temperature=1.0, seed=4)
        annotated = tree_run(
            decoder, prompt, 7, 8, mode=mode, max_new_tokens=20, temperature=1.0, seed=4, annotate_oracle=True
        )
        assert generated(annotated) == generated(plain)
        assert all(r.oracle_tree_size is not None for r in annotated[:-1])
