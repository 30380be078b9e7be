"""The measured latency profile: shape, monotone curves, on-disk cache."""
import torch

from libraspec.models.registry import tiny_pair
from libraspec.profiling import cached_profile, measure_profile, monotone

torch.set_num_threads(1)


def test_monotone_is_the_isotonic_fit():
    assert monotone([1.0, 3.0, 2.0, 4.0]) == (1.0, 2.5, 2.5, 4.0)
    assert monotone([5.0, 4.0, 3.0]) == (4.0, 4.0, 4.0)
    assert monotone([1.0, 2.0]) == (1.0, 2.0)


def test_measure_profile_on_a_tiny_pair(tmp_path, monkeypatch):
    pair = tiny_pair("llama")
    profile = measure_profile(pair, max_tokens=9, max_blocks=2, context_len=32, repeats=2)
    assert len(profile.verify_s) == 9 and len(profile.draft_s) == 2
    assert all(b >= a for a, b in zip(profile.verify_s, profile.verify_s[1:]))
    assert profile.n == pair.n
    assert len(profile.meta["raw_verify_s"]) == 9 and profile.meta["pair"] == "tiny-llama"
    monkeypatch.setenv("LIBRASPEC_CACHE", str(tmp_path))
    first = cached_profile(pair, max_tokens=5, max_blocks=1, context_len=16, repeats=1)
    files = list((tmp_path / "profiles").glob("tiny-llama-*.json"))
    assert len(files) == 1
    assert cached_profile(pair, max_tokens=5, max_blocks=1, context_len=16, repeats=1) == first
    files[0].write_text("{broken")
    again = cached_profile(pair, max_tokens=5, max_blocks=1, context_len=16, repeats=1)
    assert len(again.verify_s) == 5
