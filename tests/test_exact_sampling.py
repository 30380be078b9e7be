"""Sampling is lossless in every mode, with every drafter, proved by exact enumeration.

On the tiny-vocabulary pair of tests/test_sampling.py (V = 6, a random block-diffusion drafter
with n = 3, float64), the output distribution of 3 new tokens is computed exactly by running the
real engine once per leaf of its random choices (tests/exact.py) and compared with the target's
own distribution of 3 tokens, computed here from the target model with this file's own top-k /
top-p. Every mode x drafter cell under top-k, and the plain and top-p filters on a chain, a tree and the
oracle (`CELLS`), must be within total variation 1e-9.

The prompt repeats itself so that the look-up drafter proposes; the LibraSpec and
ddtree-libraspec settings make Algorithm 1 draft a second block and roll back (asserted), which
is where a policy that read the sampled drafts' q_i(x_i) broke losslessness (issue 31). Planted
bugs show that the comparison can fail: an acceptance ratio off by 10%, a correction drawn from p
instead of the residual, tree siblings tried with one shared uniform, a tree residual that keeps
the rejected siblings, and the block drafter as it was before this test (drafts sampled while
drafting, later blocks conditioned on them, q_i = q(x_i) handed to the policy).
"""

from __future__ import annotations

import itertools

import pytest
import torch
from exact import Branching, output_distribution, total_variation
from test_iterative_drafter import MIXED_THRESHOLD
from test_sampling import filtered
from test_sampling import pair as v6_pair  # noqa: F401  (fixture)

import libraspec.engine as engine
import libraspec.tree as tree_module
from libraspec.cost import LatencyProfile
from libraspec.drafters.block import BlockDiffusionDrafter, BlockDraft
from libraspec.drafters.iterative import IterativeBlockDrafter
from libraspec.engine import SpeculativeDecoder
from libraspec.modes import get_mode, make_policy
from libraspec.policy import LibraSpecPolicy
from libraspec.priced import PricedLibraSpecPolicy
from libraspec.serving.sglang import SGLangAdaptivePolicy
from libraspec.serving.transformers_threshold import ConfidenceThresholdPolicy
from libraspec.tree_policy import PricedTreePolicy
from libraspec.verify import probabilities

LAYER = "unit"  # tests/conftest.py

torch.set_num_threads(1)
PROMPT = [1, 4, 3, 5, 1, 4, 3, 5, 1, 4]  # repeats: the look-up drafter proposes 3, 5, 1, ...
NEW = 3
PROFILE = LatencyProfile.from_linear(0.05, 0.004, 0.01, 3, 64)
SETTINGS = {  # knobs under which each mode makes its decisions on this pair
    "static": dict(static_length=3),
    "libraspec": dict(alpha=3.0, d_max=6),
    "g4": dict(g4_initial=1, d_max=6),
    "failfast": dict(failfast_threshold=0.3, failfast_step=1, d_max=6),
    "failfast-paper": dict(failfast_threshold=0.45, failfast_step=10, d_max=60),
    "ddtree": dict(tree_depth=3, node_budget=8),
    "ddtree-libraspec": dict(alpha=1.0, d_max=6, node_budget=8),
    "ddtree-marginal": dict(alpha=3.0, d_max=6, node_budget=8),
    "ddtree-priced": dict(d_max=6, node_budget=8),
    "libraspec-priced": dict(d_max=6),
    "vllm-adaptive": dict(d_max=6),  # priced by PROFILE: d from the chain's survivals
    "vllm-schedule": dict(d_max=6),  # K(1) of assets/batch_schedule.json, capped at 6
}
# the engines' rules (libraspec/serving/), made to adapt from the first round on so that the cells
# enumerate decisions taken from earlier rounds: SGLang from tier 1 with no warm-up, a recomputation
# every round and an EMA that is the last round's accepted drafts, transformers re-fitting its
# threshold from 2 pairs (their sources start at tier 3, wait 10 rounds and 6 pairs, and SGLang's
# EMA weighs a round 0.2); test_serving_rules_that_adapt_sample_the_target_exactly sees them adapt
SERVING = {
    "sglang-adaptive": lambda: SGLangAdaptivePolicy(6, initial=1, ema_alpha=1.0, warmup=0, interval=1),
    "hf-threshold": lambda: ConfidenceThresholdPolicy(6, min_pairs=2),
}
MODES = (
    "static",
    "libraspec",
    "libraspec-priced",
    "g4",
    "failfast",
    "failfast-paper",
    "sglang-adaptive",
    "hf-threshold",
    "vllm-adaptive",
    "vllm-schedule",
    "oracle",
    "ddtree",
    "ddtree-libraspec",
    "ddtree-marginal",
    "ddtree-priced",
)
FILTERS = {"plain": dict(), "top-k": dict(top_k=3), "top-p": dict(top_p=0.8)}


def target_distribution(pair, prompt, k: int, top_k: int = 0, top_p: float = 1.0) -> dict[tuple, float]:
    """P(x_1..x_k) of the target for every k-token continuation, from the model itself."""
    V, model = pair.target.vocab_size, pair.target.model
    out = {}
    for seq in itertools.product(range(V), repeat=k):
        ids = torch.tensor([prompt + list(seq)], device=model.device)
        with torch.no_grad():
            rows = torch.softmax(model(input_ids=ids).logits[0, len(prompt) - 1 : -1].double(), -1).cpu()  # (k, V)
        p = 1.0
        for j, t in enumerate(seq):
            p *= filtered(rows[j].tolist(), top_k, top_p)[t]
            if p == 0.0:
                break
        if p > 0.0:
            out[seq] = p
    return out


@pytest.fixture(scope="module")
def targets(v6_pair):  # noqa: F811
    return {name: target_distribution(v6_pair, PROMPT, NEW, **f) for name, f in FILTERS.items()}


def policy_maker(pair, mode: str):
    """make_policy(state) for `output_distribution`; G4 carries its length across rounds."""
    if get_mode(mode.removesuffix("-paper")).factory is None:
        return (lambda state: None), (lambda policy: None)
    name = mode.removesuffix("-paper")
    if name in SERVING:  # their state (tier and EMA; threshold and pairs) carries across rounds
        return (lambda state: Resumed(SERVING[name](), state)), (lambda policy: policy.policy.snapshot())
    settings = SETTINGS[mode]
    if name == "g4":
        return (
            lambda state: make_policy("g4", pair.n, **{**settings, "g4_initial": state or settings["g4_initial"]}),
            lambda policy: policy.length,
        )
    if name == "ddtree-priced":  # V, its seconds per committed token so far, carries across rounds
        return (
            lambda state: PricedTreePolicy(PROFILE, settings["d_max"], settings["node_budget"], *(state or ())),
            lambda policy: policy.prior_now(),
        )
    if name == "libraspec-priced":  # V, the length, context and drafter c is priced at carry across rounds
        return (
            lambda state: PricedLibraSpecPolicy(PROFILE, settings["d_max"], *(state or ())),
            lambda policy: policy.prior_now(),
        )
    return (lambda state: make_policy(name, pair.n, PROFILE, **settings)), (lambda policy: None)  # priced: PROFILE


class Resumed:
    """A serving rule whose reset() brings back the state an earlier round left (each round of the
    enumeration is a new run, which resets its policy first)."""

    def __init__(self, policy, state, chosen: list | None = None):
        self.policy, self.state, self.chosen = policy, state, chosen
        self.name, self.d_max = policy.name, policy.d_max

    def choose_length(self, buffer):
        decision = self.policy.choose_length(buffer)
        if self.chosen is not None:  # (state, d) of every decision, before the engine cuts d to the room
            self.chosen.append((self.policy.snapshot(), decision.d))
        return decision

    def update(self, record):
        self.policy.update(record)

    def reset(self):
        self.policy.reset()
        if self.state is not None:
            self.policy.restore(self.state)


def exact(pair, mode: str, drafter, observe=None, new: int = NEW, **sampling) -> dict:
    decoder = SpeculativeDecoder(pair, PROFILE, drafter=drafter)
    make, state_of = policy_maker(pair, mode)
    return output_distribution(
        decoder,
        PROMPT,
        mode.removesuffix("-paper"),
        make,
        new,
        dict(temperature=1.0, lookahead=6, **sampling),
        state_of,
        observe,
    )


# Every mode with every drafter under top-k, and each other filter with the chain drafters on one chain
# mode, one tree mode and the oracle. A filter acts in `verify.probabilities`, on the target's and the
# drafter's distributions alike and the same way in every mode (a mode decides d before any draft is
# drawn), so crossing it with every mode again tested nothing new and took 90 of this file's 180 s.
# The iterative drafter's passes mix several fixes and one (tests/test_iterative_drafter.py); the
# autoregressive head drafts a token a step, each step fed the head's own hidden state.
DRAFTERS = ("dflash", "lookup", "hybrid", "fastdllm", "eagle")
FILTER_MODES = ("static", "ddtree", "oracle")
CELLS = [(mode, d, "top-k") for mode in MODES for d in DRAFTERS] + [
    (mode, d, f) for mode in FILTER_MODES for d in ("dflash", "lookup", "hybrid") for f in ("plain", "top-p")
]


def drafter_of(pair, name: str):
    if name == "fastdllm":
        return IterativeBlockDrafter(pair.drafter, pair.target, threshold=MIXED_THRESHOLD)
    return name


@pytest.mark.parametrize("mode,drafter,filt", CELLS)
def test_every_mode_and_drafter_samples_the_target_exactly(v6_pair, targets, mode, drafter, filt):  # noqa: F811
    records = []
    dist = exact(v6_pair, mode, drafter_of(v6_pair, drafter), records.append, **FILTERS[filt])
    assert sum(dist.values()) == pytest.approx(1.0, abs=1e-12)
    tv = total_variation(dist, targets[filt])
    assert tv < 1e-9, f"{mode} / {drafter} / {filt}: total variation {tv:.3g}"
    assert any(r.chosen_length >= 1 for r in records)  # drafts were verified
    if mode == "libraspec" and drafter == "dflash":
        steps = [s for r in records for s in r.policy_steps]
        assert any(s.blocks_requested for s in steps) and any(s.rollback for s in steps)  # a second block, a rollback


def test_libraspec_from_a_start_past_the_first_block_samples_the_target_exactly(v6_pair, targets):  # noqa: F811
    """LibraSpec started at 5 drafts (the paper starts its Fast-dLLM runs at 10): two blocks of n = 3
    are drafted before line 4, the loop reads their q_i only, and the output is the target's."""
    records = []
    decoder = SpeculativeDecoder(v6_pair, PROFILE, drafter="dflash")
    sampling = dict(temperature=1.0, lookahead=6, top_k=3)

    def make(state):
        return LibraSpecPolicy(3.0, 6, start=5)

    dist = output_distribution(decoder, PROMPT, "libraspec", make, NEW, sampling, observe=records.append)
    assert total_variation(dist, targets["top-k"]) < 1e-9
    assert all(r.blocks_drafted >= 2 for r in records if r.chosen_length)  # the start's two blocks
    assert {s.d_before for r in records for s in r.policy_steps[:1]} == {5}


# -- planted bugs: each must move the output away from the target --------------------------------


def planted_tv(pair, mode: str, drafter="dflash", **sampling) -> float:
    dist = exact(pair, mode, drafter, **sampling)
    return total_variation(
        dist, target_distribution(pair, PROMPT, NEW, sampling.get("top_k", 0), sampling.get("top_p", 1.0))
    )


def test_an_acceptance_ratio_off_by_ten_percent_is_caught(v6_pair, monkeypatch):  # noqa: F811
    class Lenient(Branching):
        def below(self, key, threshold):
            return super().below(key, min(1.0, 1.1 * threshold))

    monkeypatch.setattr("exact.Branching", Lenient)
    assert planted_tv(v6_pair, "static") > 1e-3


def test_a_correction_drawn_from_p_instead_of_the_residual_is_caught(v6_pair, monkeypatch):  # noqa: F811
    monkeypatch.setattr(engine, "sample_accept", _accept_then_p)
    assert planted_tv(v6_pair, "static") > 1e-3


def _accept_then_p(drafts, draft_probs, target_logits, cfg, rng):
    """The acceptance test of verify.sample_accept, but the correction from p itself (a planted bug)."""
    p = probabilities(target_logits, cfg)
    for i in range(drafts.shape[0]):
        x = int(drafts[i])
        if not rng.below(i, float(p[i, x]) / float(draft_probs[i, x])):
            return i, rng.sample(p[i])
    return drafts.shape[0], rng.sample(p[drafts.shape[0]])


def test_tree_siblings_sharing_one_uniform_are_caught(v6_pair, monkeypatch):  # noqa: F811
    class Shared(Branching):
        def below(self, key, threshold):
            return super().below((key[0], 0) if isinstance(key, tuple) else key, threshold)

    monkeypatch.setattr("exact.Branching", Shared)
    assert planted_tv(v6_pair, "ddtree") > 1e-3


def test_a_tree_residual_that_keeps_rejected_siblings_is_caught(v6_pair, monkeypatch):  # noqa: F811
    monkeypatch.setattr(tree_module, "tree_residual", lambda tree, probs, node: probs)
    assert planted_tv(v6_pair, "ddtree") > 1e-3


class EagerDraft(BlockDraft):
    """The block drafter before issue 31 (planted): drafts sampled while drafting, later blocks
    conditioned on them, and the policy handed q_i(x_i) of the sampled token."""

    rng = None

    def _step(self):
        _, _, full, source = super()._step()  # distributions conditioned on self.tokens: the samples so far
        probs = self._dists[-1]  # (n, V)
        x = [self.rng.sample(row) for row in probs]
        return x, [float(probs[i, t]) for i, t in enumerate(x)], full, source

    def draw(self, d, rng):
        return self.tokens[:d], self.draft_probs(d)


class EagerDrafter(BlockDiffusionDrafter):
    def __init__(self, pair, decoder_box):
        super().__init__(pair.drafter, pair.target)
        self.decoder_box = decoder_box

    def start_round(self, context, ids, sampling):
        EagerDraft.rng = self.decoder_box[0].randomness(0)  # the run's (enumerating) random source
        return EagerDraft(self.module, context, ids[-1], len(ids) - 1, self.vocab_size, sampling)


def test_libraspec_reading_sampled_drafts_is_caught(v6_pair):  # noqa: F811
    """Today's (pre-fix) LibraSpec with the block drafter, as the issue found it, is not lossless;
    the same settings with the chain drafter are (the cell test above)."""
    box = []
    drafter = EagerDrafter(v6_pair, box)
    decoder = SpeculativeDecoder(v6_pair, PROFILE, drafter=drafter)
    box.append(decoder)
    make, state_of = policy_maker(v6_pair, "libraspec")
    dist = output_distribution(decoder, PROMPT, "libraspec", make, NEW, dict(temperature=1.0, top_k=3), state_of)
    tv = total_variation(dist, target_distribution(v6_pair, PROMPT, NEW, top_k=3))
    print(f"pre-fix LibraSpec (top-k 3): total variation {tv:.4g}")  # 0.0075 when written
    assert tv > 1e-3


DEEP = 5  # n + 2 new tokens: a first round can verify d = 4 > n, so second-block drafts are verified
SECOND_BLOCK = {
    "static": dict(static_length=4),
    "libraspec": dict(alpha=16.0, d_max=6),
    "oracle": {},
    "ddtree": dict(tree_depth=4, node_budget=6),
}


def topk_target(pair, prompt: list[int], k_tokens: int, top_k: int) -> dict[tuple, float]:
    """The target's distribution of k_tokens tokens under top-k, recursing over each step's support."""
    model, out = pair.target.model, {}

    def walk(seq: list[int], p: float) -> None:
        if len(seq) == k_tokens:
            out[tuple(seq)] = p
            return
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([prompt + seq], device=model.device)).logits[0, -1].double().cpu()
        row = filtered(torch.softmax(logits, -1).tolist(), top_k, 1.0)
        for token, q in enumerate(row):
            if q > 0.0:
                walk(seq + [token], p * q)

    walk([], 1.0)
    return out


@pytest.mark.parametrize("drafter", ["dflash", "fastdllm", "eagle", "hybrid"])
@pytest.mark.parametrize("mode", list(SECOND_BLOCK))
def test_rounds_that_verify_second_block_drafts_sample_the_target_exactly(v6_pair, mode, drafter):  # noqa: F811
    """5 new tokens with top-k 2: rounds verify d = 4 > n = 3 drafts, so the second block's proposals
    (conditioned on the chain), their draws (uniforms past the first block) and the hybrid's switch
    from look-up to diffusion are enumerated too; the output is the target's exactly. (Planted, not
    kept: second-block drafts verified against the steps' proposals swapped give TV 0.134; the
    3-token cells above never verify a second block.)"""
    records = []
    decoder = SpeculativeDecoder(v6_pair, PROFILE, drafter=drafter_of(v6_pair, drafter))
    settings = SECOND_BLOCK[mode]
    make = (lambda state: None) if mode == "oracle" else (lambda state: make_policy(mode, v6_pair.n, **settings))
    dist = output_distribution(
        decoder, PROMPT, mode, make, DEEP, dict(temperature=1.0, top_k=2, lookahead=6), observe=records.append
    )
    tv = total_variation(dist, topk_target(v6_pair, PROMPT, DEEP, 2))
    assert tv < 1e-9, f"{mode} / {drafter}: total variation {tv:.3g}"
    if mode != "oracle":  # the oracle draws D = 4 drafts for its look-ahead, verifying a(D) + 1 <= 2 of them here
        assert any(r.blocks_drafted >= 2 for r in records)
        assert max(r.chosen_length for r in records) > v6_pair.n  # drafts of a second block were verified


@pytest.mark.parametrize("drafter", ["dflash", "hybrid"])
@pytest.mark.parametrize("mode", list(SERVING))
def test_serving_rules_that_adapt_sample_the_target_exactly(v6_pair, mode, drafter):  # noqa: F811
    """5 new tokens with top-k 2, the rule's state carried from round to round: later rounds choose
    a d from what earlier rounds' outcomes left (SGLang's tier rising from 1 after an accepted draft,
    transformers' threshold re-fitted from the pairs), and the output is the target's exactly."""
    chosen = []
    decoder = SpeculativeDecoder(v6_pair, PROFILE, drafter=drafter)
    sampling = dict(temperature=1.0, top_k=2, lookahead=6)
    dist = output_distribution(
        decoder,
        PROMPT,
        mode,
        lambda state: Resumed(SERVING[mode](), state, chosen),
        DEEP,
        sampling,
        lambda policy: policy.policy.snapshot(),
    )
    tv = total_variation(dist, topk_target(v6_pair, PROMPT, DEEP, 2))
    assert tv < 1e-9, f"{mode} / {drafter}: total variation {tv:.3g}"
    if mode == "sglang-adaptive":  # tier 1 first; tier 3 once a round accepted its draft
        assert {d for _, d in chosen} == {1, 3}
    else:  # the first threshold 0.4 and re-fitted ones chose lengths
        assert len({threshold for (threshold, _, _), _ in chosen}) > 1 and len({d for _, d in chosen}) > 1
