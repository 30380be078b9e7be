"""Devices: engine losslessness on a CUDA GPU (marked `cuda`), and the device choice itself.

On CUDA the tiny pairs run in bfloat16 and float32: greedy static, LibraSpec and oracle
decoding must give the target's own greedy (AR) output on the same device and dtype. One
forward over d + 1 tokens and d + 1 single-token forwards round differently, so a greedy
choice between two almost equal logits may flip: a divergence from AR is accepted only
where the target's top-2 logit margin is within the dtype's rounding (a numerical tie),
never at a clearly decided token. `scripts/gpu_check.sh` runs the `cuda` tests; without a
GPU they skip with a reason. The device-choice tests need no GPU.
"""

from __future__ import annotations

import json

import pytest
import torch

from libraspec import device as dev
from libraspec.cost import LatencyProfile
from libraspec.drafters import DRAFTERS
from libraspec.engine import DecodeConfig, SpeculativeDecoder
from libraspec.models.registry import tiny_pair
from libraspec.modes import MODES
from libraspec.policy import LibraSpecPolicy
from libraspec.spec import RunSpec

LAYER = "unit"  # tests/conftest.py

torch.set_num_threads(1)
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine")
PROFILE = LatencyProfile.from_linear(t0=0.01, c=0.0002, draft_per_block=0.002, n=7, max_tokens=40)
DEVICE = "cuda"
TIE = {torch.bfloat16: 2.0**-5, torch.float32: 2.0**-14}  # margin / max |logit| counted as a tie


def generated(records):
    return [t for r in records for t in r.committed_tokens]


def top2_margin(pair, ids: list[int]) -> tuple[float, float]:
    """(top-1 minus top-2 logit, max |logit|) of the target's next token after `ids`, one full forward."""
    out = pair.target.forward(pair.target.new_cache(), ids, with_hidden=False).logits[-1].float()  # (V,)
    top = out.topk(2).values
    return float(top[0] - top[1]), float(out.abs().max())


def assert_lossless(pair, prompt: list[int], out: list[int], reference: list[int], label: str) -> bool:
    """True when `out` equals `reference`; a divergence must sit at a numerical tie of the target."""
    if out == reference:
        return True
    k = next((i for i, (a, b) in enumerate(zip(out, reference)) if a != b), min(len(out), len(reference)))
    margin, scale = top2_margin(pair, prompt + reference[:k])
    assert margin <= TIE[pair.target.dtype] * max(scale, 1e-6), (
        f"{label}: differs from AR at generated token {k}, where the target's top-2 margin is {margin:.3g} "
        f"(max |logit| {scale:.3g}): not a rounding tie"
    )
    return False


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_greedy_decoding_is_lossless_on_cuda(arch, dtype):
    """Every mode of the registry (trees included) with every drafter. fp32 must equal AR exactly;
    bf16 may diverge at a rounding tie only, and how often it does is printed (scripts/gpu_check.py
    reads the CUDA-GREEDY line into its report)."""
    pair = tiny_pair(arch, seed=3, device=DEVICE, dtype=dtype)
    assert pair.target.device.type == next(pair.drafter.parameters()).device.type == DEVICE
    gen = torch.Generator().manual_seed(11)
    prompts = [torch.randint(3, pair.target.vocab_size, (5 + 7 * count,), generator=gen).tolist() for count in range(2)]
    settings, _ = RunSpec(d_max=21).checked(pair.n)
    config = DecodeConfig(max_new_tokens=40, lookahead=21)
    counts = {}
    for drafter in DRAFTERS:
        decoder = SpeculativeDecoder(pair, PROFILE, drafter=drafter)
        for prompt in prompts:
            reference = generated(decoder.run(prompt, "ar", None, config))
            assert len(reference) == 40
            for mode in (name for name in MODES if name != "ar"):
                out = generated(decoder.run(prompt, mode, MODES[mode].policy(settings, decoder.profile), config))
                same = assert_lossless(pair, prompt, out, reference, f"{arch} {dtype} {drafter} {mode}")
                exact, total = counts.get(f"{drafter}/{mode}", (0, 0))
                counts[f"{drafter}/{mode}"] = (exact + same, total + 1)
    print("CUDA-GREEDY " + json.dumps({"arch": arch, "dtype": str(dtype), "exact_of_runs": counts}))
    if dtype == torch.float32:
        assert all(exact == total for exact, total in counts.values()), counts
    else:
        assert sum(e for e, _ in counts.values()) >= sum(t for _, t in counts.values()) // 2, counts


@pytest.mark.cuda
@needs_cuda
def test_sampling_runs_on_cuda_with_cpu_random_numbers():
    pair = tiny_pair("qwen3", seed=1, device=DEVICE, dtype=torch.bfloat16)
    decoder = SpeculativeDecoder(pair, PROFILE)
    config = DecodeConfig(max_new_tokens=32, temperature=0.8, seed=5, lookahead=14, annotate_oracle=True)
    for mode, policy in (("ar", None), ("libraspec", LibraSpecPolicy(2.2, 14)), ("oracle", None)):
        first = generated(decoder.run([1, 70, 80, 90], mode, policy, config))
        again = generated(decoder.run([1, 70, 80, 90], mode, policy, config))
        assert first == again and 1 <= len(first) <= 32  # seeded: reproducible on the GPU too
        assert all(0 <= t < pair.target.vocab_size for t in first)


@pytest.mark.cuda
@needs_cuda
def test_profile_is_measured_on_the_gpu():
    from libraspec.profiling import measure_profile

    profile = measure_profile(
        tiny_pair("llama", device="cuda", dtype=torch.bfloat16), max_tokens=6, max_blocks=1, context_len=32, repeats=2
    )
    assert profile.meta["device"].startswith("cuda") and profile.meta["gpu"]
    assert len(profile.verify_s) == 6 and all(t > 0 for t in profile.verify_s)


def test_the_tie_rule_catches_a_real_divergence():
    """A token changed where the target is decided must fail the check (so it can fail on a GPU)."""
    pair = tiny_pair("llama", seed=3)
    prompt = [1, 40, 50, 60]
    reference = generated(SpeculativeDecoder(pair, PROFILE).run(prompt, "ar", None, DecodeConfig(max_new_tokens=8)))
    assert assert_lossless(pair, prompt, list(reference), reference, "same")
    margins = [top2_margin(pair, prompt + reference[:k]) for k in range(8)]
    k = max(range(8), key=lambda i: margins[i][0] / margins[i][1])  # the most clearly decided token
    wrong = reference[:k] + [(reference[k] + 1) % pair.target.vocab_size] + reference[k + 1 :]
    with pytest.raises(AssertionError, match=f"differs from AR at generated token {k}"):
        assert_lossless(pair, prompt, wrong, reference, "corrupted")


# ---- device choice (no GPU needed) -----------------------------------------------------------


def test_defaults_follow_the_hardware(monkeypatch):
    monkeypatch.delenv(dev.DEVICE_ENV, raising=False)
    monkeypatch.delenv(dev.DTYPE_ENV, raising=False)
    monkeypatch.delenv("SPACES_ZERO_GPU", raising=False)
    device, dtype = dev.resolve()
    if torch.cuda.is_available():
        assert (device.type, dtype) == ("cuda", torch.bfloat16)
    else:
        assert (device.type, dtype) == ("cpu", torch.float32)
    assert dev.resolve("cpu", "bf16") == (torch.device("cpu"), torch.bfloat16)
    monkeypatch.setenv(dev.DTYPE_ENV, "float64")
    monkeypatch.setenv(dev.DEVICE_ENV, "cpu")
    assert dev.resolve() == (torch.device("cpu"), torch.float64)
    assert tiny_pair("llama").target.dtype == torch.float32  # an explicit dtype wins over the env


def test_bad_device_names_are_clear(monkeypatch):
    monkeypatch.delenv("SPACES_ZERO_GPU", raising=False)
    with pytest.raises(ValueError, match="unknown device 'tpu0'"):
        dev.resolve("tpu0")
    with pytest.raises(ValueError, match="not supported"):
        dev.resolve("meta")
    with pytest.raises(ValueError, match="unknown dtype 'int8'"):
        dev.resolve("cpu", "int8")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA GPU is available"):
            dev.resolve("cuda")
