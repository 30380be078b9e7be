"""The iterative (Fast-dLLM-style) block drafter: its first pass is the single-pass drafter's,
a block takes 1..n passes, q_i is the peak of the pass that fixed position i, and every pass is
priced. (Lossless greedy decoding, exact sampling and trace replay: the registry-wide tests.)"""

from __future__ import annotations

import pytest
import torch
from test_sampling import pair as v6_pair  # noqa: F401  (fixture)

from libraspec.cost import LatencyProfile, drafting_s
from libraspec.drafters import make_drafter, round_drafting
from libraspec.drafters.iterative import IterativeBlockDrafter
from libraspec.verify import SamplingConfig

LAYER = "unit"  # tests/conftest.py

PROFILE = LatencyProfile.from_linear(t0=0.05, c=0.004, draft_per_block=0.01, n=3, max_tokens=40)
PROMPT = [1, 4, 3, 5, 1, 4, 3, 5, 1, 4]
MIXED_THRESHOLD = 0.6  # tests/test_exact_sampling.py's iterative drafter


def round_of(pair, drafter, sampling: SamplingConfig, blocks: int = 2):
    """A buffer anchored after PROMPT with `blocks` steps drafted."""
    context = drafter.new_context()
    with torch.inference_mode():
        hidden = pair.target.forward(pair.target.new_cache(), PROMPT[:-1], with_hidden=True).hidden_states
        drafter.fit_context(context, PROMPT, hidden, 0)
    buffer = drafter.start_round(context, PROMPT, sampling)
    buffer.extend(blocks)
    return buffer


@pytest.mark.parametrize("sampling", [SamplingConfig(), SamplingConfig(temperature=1.0, top_k=3)])
def test_a_threshold_every_peak_reaches_is_the_single_pass_drafter(v6_pair, sampling):  # noqa: F811
    """With every position fixed in the first pass, a step is the single-pass drafter's step:
    the same chain, q_i and proposals (so the first pass really is the block drafter's input)."""
    single = round_of(v6_pair, make_drafter("dflash", v6_pair), sampling)
    one_pass = round_of(v6_pair, IterativeBlockDrafter(v6_pair.drafter, v6_pair.target, threshold=1e-12), sampling)
    assert one_pass.tokens == single.tokens
    assert one_pass.confidences.tolist() == pytest.approx(single.confidences.tolist(), abs=1e-12)
    assert one_pass.step_passes == [1, 1] and one_pass.discarded == []
    if not sampling.greedy:
        assert torch.allclose(one_pass.draft_probs(6), single.draft_probs(6), atol=1e-12)


def test_an_unreachable_threshold_fixes_one_position_a_pass_most_confident_first(v6_pair):  # noqa: F811
    """Threshold 1: each pass fixes only the most confident open position, so a block takes n
    passes; the first fixed is pass 1's most confident position, with pass 1's peak as its q."""
    n = v6_pair.n
    single = round_of(v6_pair, make_drafter("dflash", v6_pair), SamplingConfig(), blocks=1)
    slow = round_of(v6_pair, IterativeBlockDrafter(v6_pair.drafter, v6_pair.target, threshold=1.0), SamplingConfig())
    assert slow.step_passes == [n, n]
    assert slow.discarded == [(0, "dflash")] * (n - 1) + [(1, "dflash")] * (n - 1)
    first = int(single.confidences.argmax())
    assert slow.tokens[first] == single.tokens[first]
    assert slow.confidences[first] == pytest.approx(single.confidences[first], abs=1e-12)
    assert all(0.0 < q <= 1.0 for q in slow.confidences)


def test_passes_vary_with_the_threshold_and_every_pass_is_priced(v6_pair):  # noqa: F811
    """At Fast-dLLM's threshold under top-k sampling some passes fix several positions and some one;
    the engine's price of the steps run is one block-diffusion pass per pass, and the class's
    price for an unrun round (n passes a block) is never below it."""
    buffer = round_of(v6_pair, make_drafter("fastdllm", v6_pair), SamplingConfig(temperature=1.0, top_k=2), blocks=3)
    assert 1 <= min(buffer.step_passes) and max(buffer.step_passes) <= v6_pair.n
    passes = sum(buffer.step_passes)
    for blocks in (1, 2, 3):
        ran = buffer.steps_run(blocks)
        assert len(ran) == sum(buffer.step_passes[:blocks])
        assert drafting_s(PROFILE, ran) == pytest.approx(PROFILE.draft_time(len(ran)))
    most = round_drafting("fastdllm", (), v6_pair.n)
    assert drafting_s(PROFILE, most.steps(3)) >= drafting_s(PROFILE, buffer.steps_run(3))
    assert len(most.steps(3)) == 3 * v6_pair.n >= passes
    with pytest.raises(ValueError, match="needs the drafter's n"):
        round_drafting("fastdllm")


def test_the_exact_cells_threshold_mixes_both_kinds_of_pass(v6_pair):  # noqa: F811
    """The random tiny drafter's peaks stay below Fast-dLLM's 0.9, where every pass is a fallback;
    at MIXED_THRESHOLD under top-k 3 (the exact sampling cells' setting) a step's passes fix several
    positions at once in one step and one at a time in another, so both branches are enumerated."""
    drafter = IterativeBlockDrafter(v6_pair.drafter, v6_pair.target, threshold=MIXED_THRESHOLD)
    passes = round_of(v6_pair, drafter, SamplingConfig(1.0, top_k=3), 3).step_passes
    assert min(passes) == 1 and max(passes) == v6_pair.n, passes
    default = round_of(v6_pair, make_drafter("fastdllm", v6_pair), SamplingConfig(1.0, top_k=3), 3).step_passes
    assert default == [v6_pair.n] * 3


def test_bad_threshold_is_refused(v6_pair):  # noqa: F811
    for bad in (0.0, -0.5, 1.5):
        with pytest.raises(ValueError, match="threshold"):
            IterativeBlockDrafter(v6_pair.drafter, v6_pair.target, threshold=bad)
