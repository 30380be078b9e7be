"""The measured latency profile: shape, monotone curves, on-disk cache."""

import dataclasses
import json

import numpy as np
import pytest
import torch
from profile_checks import physical

from libraspec import profiling
from libraspec.cost import LatencyProfile
from libraspec.drafters.lookup import LookupCalibration, LookupDrafter
from libraspec.engine import DecodeConfig, SpeculativeDecoder
from libraspec.models.registry import tiny_pair
from libraspec.policy import StaticPolicy
from libraspec.profiling import cached_profile, knot_fit, measure_profile, monotone, timed_interleaved

LAYER = "unit"  # tests/conftest.py

torch.set_num_threads(1)


def test_monotone_is_the_isotonic_fit():
    assert monotone([1.0, 3.0, 2.0, 4.0]) == (1.0, 2.5, 2.5, 4.0)
    assert monotone([5.0, 4.0, 3.0]) == (4.0, 4.0, 4.0)
    assert monotone([1.0, 2.0]) == (1.0, 2.0)


def test_knot_fit_keeps_a_curve_that_is_linear_between_its_knots():
    """Knots at 1, 2, 4, 8, 16 and the last length: such a curve comes back as it was."""
    knots, values = [1, 2, 4, 8, 16, 25], [10.0, 14.0, 16.0, 19.0, 27.0, 30.0]
    curve = np.interp(np.arange(1, 26), knots, values)
    assert knot_fit(curve) == pytest.approx(tuple(curve))
    assert knot_fit([3.0, 5.0]) == pytest.approx((3.0, 5.0))


def test_knot_fit_stays_within_the_measured_times_when_one_median_is_far_off():
    """One median 30x the others at a knot (k = 8 of 9; a loaded machine timing once) swung the
    least-squares knots below zero, and a profile of those times is refused (the GPU check's dry
    run failed on a loaded CI machine so)."""
    fitted = knot_fit([1.0] * 7 + [30.0, 1.0])
    assert min(fitted) >= 1.0 and max(fitted) <= 30.0 and np.all(np.diff(fitted) >= 0)


def test_knot_fit_pools_noise_that_an_isotonic_fit_turns_into_steps():
    """Medians scattered around a CPU-like curve (a step from 1 to 2 tokens, then a line): the AR
    step (k = 1) keeps its own median, the curve never falls, and it lies closer to the truth than
    the isotonic fit of the same medians."""
    rng = np.random.default_rng(0)
    line = 0.1 + 0.004 * np.arange(1, 50)  # (49,) seconds
    line[0] = 0.08
    errors = {"knot": [], "isotonic": []}
    for _ in range(20):
        medians = line * (1 + 0.06 * rng.standard_normal(line.size))
        fitted = np.asarray(knot_fit(medians))
        assert fitted[0] == pytest.approx(medians[0]) and np.all(np.diff(fitted) >= 0)
        errors["knot"].append(np.abs(fitted - line)[1:].mean())
        errors["isotonic"].append(np.abs(np.asarray(monotone(medians)) - line)[1:].mean())
    assert np.mean(errors["knot"]) < 0.6 * np.mean(errors["isotonic"])


def test_interleaved_timing_spreads_a_slowing_machine_over_every_key(monkeypatch):
    """A machine that slows down while it is measured: each call of the same work takes 0.01 s
    longer than the one before. Timed one key after another, 8 keys x 8 calls would put 0.56 s
    between the first key's median and the last's; in shuffled rounds every key sees the same drift."""
    clock = {"now": 0.0, "calls": 0}

    def work():
        clock["now"] += 1.0 + 0.01 * clock["calls"]
        clock["calls"] += 1

    monkeypatch.setattr(profiling.time, "perf_counter", lambda: clock["now"])
    medians = timed_interleaved({k: work for k in range(8)}, repeats=7)
    assert len(medians) == 8 and clock["calls"] == 8 * 8  # one warm-up round, dropped
    assert max(medians.values()) - min(medians.values()) < 0.1


def test_interleaved_timing_pools_the_copies_of_a_key(monkeypatch):
    """A key called c times a round is timed c x (repeats + 1) times, its c warm-up calls are
    dropped and its median pools the rest: calls alternating 3 s and 1 s leave 10 of each."""
    clock = {"now": 0.0, "calls": 0}

    def work():
        clock["now"] += 1.0 if clock["calls"] % 2 else 3.0
        clock["calls"] += 1

    monkeypatch.setattr(profiling.time, "perf_counter", lambda: clock["now"])
    medians = timed_interleaved({"ar": work, "other": lambda: None}, repeats=5, copies={"ar": 4})
    assert clock["calls"] == 4 * 6  # 4 copies x (5 repeats + 1 warm-up round)
    assert medians["ar"] == 2.0 and medians["other"] == 0.0


def test_measure_profile_on_a_tiny_pair(tmp_path, monkeypatch):
    pair = tiny_pair("llama")
    profile = measure_profile(pair, max_tokens=9, max_blocks=2, context_len=32, repeats=2, contexts=(128, 256, 9999))
    assert len(profile.verify_s) == 9 and len(profile.draft_s) == 2
    assert all(b >= a for a, b in zip(profile.verify_s, profile.verify_s[1:]))
    assert profile.n == pair.n
    assert len(profile.meta["raw_verify_s"]) == 9 and profile.meta["pair"] == "tiny-llama"
    assert profile.tree_rows == (2, 9, 17, 33, 65) and len(profile.meta["raw_tree_verify_s"]) == 5
    assert all(b >= a for a, b in zip(profile.tree_verify_s, profile.tree_verify_s[1:]))
    # the context term, from the contexts the tiny window of 512 positions holds
    fit = profile.meta["context_fit"]
    assert profile.context_len == 32 and profile.context_k == (1, 2, 4, 8, 9) and fit["contexts"] == [32, 128, 256]
    assert all(b >= a >= 0 for a, b in zip(profile.context_slope_s, profile.context_slope_s[1:]))
    assert set(fit["median_ms"]) == {"32", "128", "256"} and fit["max_relative_error"] >= 0
    assert profile.context_points == (128, 256) and set(fit["extra_ms"]) == {"128", "256"}
    physical(profile)  # a fresh measurement (two repeats: noisy) never prices more rows or context cheaper
    flat = measure_profile(pair, max_tokens=3, max_blocks=1, context_len=32, repeats=1, contexts=(9999,), tree_rows=())
    assert flat.context_k == () and flat.context_len == 0 and "no longer context" in flat.meta["context_fit"]["note"]
    monkeypatch.setenv("LIBRASPEC_CACHE", str(tmp_path))
    first = cached_profile(pair, max_tokens=5, max_blocks=1, context_len=16, repeats=1)
    files = list((tmp_path / "profiles").glob("tiny-llama-*.json"))
    assert len(files) == 1
    assert cached_profile(pair, max_tokens=5, max_blocks=1, context_len=16, repeats=1) == first
    files[0].write_text("{broken")
    again = cached_profile(pair, max_tokens=5, max_blocks=1, context_len=16, repeats=1)
    assert len(again.verify_s) == 5


def test_one_profile_file_per_pair_grows_when_asked_for_more(tmp_path, monkeypatch):
    """Asking for a longer profile re-measures into the same file; a shorter ask reuses it."""
    monkeypatch.setenv("LIBRASPEC_CACHE", str(tmp_path))
    pair = tiny_pair("llama")
    short = cached_profile(pair, max_tokens=4, max_blocks=1, context_len=16, repeats=1)
    longer = cached_profile(pair, max_tokens=7, max_blocks=2, context_len=16, repeats=1)
    assert len(short.verify_s) == 4 and len(longer.verify_s) == 7 and len(longer.draft_s) == 2
    assert cached_profile(pair, max_tokens=5, max_blocks=1, context_len=16, repeats=1) == longer
    assert len(list((tmp_path / "profiles").glob("*.json"))) == 1
    assert longer.lookup_s > 0  # a look-up step is measured, not assumed free
    assert longer.fit_s > 0  # so is the drafter's context upkeep after a round
    assert LatencyProfile.from_dict(longer.to_dict()).fit_s == longer.fit_s


def test_a_rounds_modeled_time_counts_context_upkeep_only_for_drafters_that_read_features():
    """modeled_s = drafting + verify_time(d + 1) + fit_s with block diffusion; look-up pays no fit_s."""
    pair = tiny_pair("llama")
    profile = dataclasses.replace(LatencyProfile.from_linear(0.02, 0.001, 0.005, pair.n, 25), fit_s=0.003)
    lookup = LookupDrafter(pair.n, pair.target.vocab_size, LookupCalibration.neutral())
    for drafter, upkeep in (("dflash", 0.003), (lookup, 0.0)):
        decoder = SpeculativeDecoder(pair, profile, drafter=drafter)
        records = list(decoder.run([5, 6, 7, 8] * 4, "static", StaticPolicy(3), DecodeConfig(max_new_tokens=12)))
        for r in records:
            drafting = profile.draft_time(r.blocks_drafted) if upkeep else 0.0  # from_linear: lookup_s = 0
            assert r.modeled_s == pytest.approx(drafting + profile.verify_time(r.chosen_length + 1) + upkeep)


def test_profile_check_flags_a_profile_from_another_load():
    from types import SimpleNamespace

    from libraspec.profiling import profile_check

    profile = LatencyProfile.from_linear(0.02, 0.001, 0.005, 7, 25)  # AR step 21 ms
    ar = [SimpleNamespace(tau=1, measured_s=0.021, start_position=100 + g) for g in range(10)]
    assert profile_check(profile, ar)["ok"]
    slow = profile_check(profile, [SimpleNamespace(tau=1, measured_s=0.063, start_position=100)] * 10)
    assert not slow["ok"] and abs(slow["ratio"] - 3.0) < 1e-9


def test_a_long_context_is_priced_not_taken_for_load():
    """AR steps after 4,000 tokens take 21 ms + 3,744 x 10 us = 58 ms under a profile timed after
    256 whose context term is 10 us a token: the check finds them as modeled (ratio 1) where the
    same profile without its context term takes them for a load 2.8x heavier."""
    from types import SimpleNamespace

    from libraspec.profiling import profile_check

    flat = LatencyProfile.from_linear(0.02, 0.001, 0.005, 7, 25)
    priced = dataclasses.replace(flat, context_len=256, context_k=(1, 25), context_slope_s=(1e-5, 3e-5))
    step = 0.021 + (4000 - 256) * 1e-5
    ar = [SimpleNamespace(tau=1, measured_s=step, start_position=4000)] * 10
    assert profile_check(priced, ar)["ok"] and abs(profile_check(priced, ar)["ratio"] - 1.0) < 1e-9
    assert not profile_check(flat, ar)["ok"] and profile_check(flat, ar)["ratio"] > 2.7


def test_a_checked_cached_profile_is_measured_again_when_the_machine_disagrees(tmp_path, monkeypatch):
    """bench and sweep read the cache with check=True: a profile whose AR step is 1000x what the
    machine takes now (one written under another load, or by hand) is measured again and replaces
    the file; one within PROFILE_TOLERANCE is kept. Without check the cache is read as it is."""
    monkeypatch.setenv("LIBRASPEC_CACHE", str(tmp_path))
    pair = tiny_pair("llama")
    measured = cached_profile(pair, max_tokens=4, max_blocks=1, context_len=16, repeats=1)
    path = profiling.profile_path(pair)
    slow = dataclasses.replace(measured, verify_s=tuple(1000 * v for v in measured.verify_s))
    slow.to_json(path)
    assert cached_profile(pair, max_tokens=4, max_blocks=1, context_len=16, repeats=1) == slow
    fresh = cached_profile(pair, max_tokens=4, max_blocks=1, context_len=16, repeats=1, check=True)
    check = fresh.meta["load_check"]
    assert check["remeasured"] and check["ratio"] < 0.01 and check["profile_ar_s"] == slow.ar_token_time()
    assert fresh.ar_token_time() < slow.ar_token_time() / 100
    assert LatencyProfile.from_json(path).verify_s == fresh.verify_s  # the file holds the new one
    # within the tolerance (the step timed now is 10% off): kept, and the check says so
    monkeypatch.setattr(profiling, "ar_step_now", lambda pair, context_len: 1.1 * fresh.ar_token_time())
    kept = cached_profile(pair, max_tokens=4, max_blocks=1, context_len=16, repeats=1, check=True)
    assert kept.verify_s == fresh.verify_s and not kept.meta["load_check"]["remeasured"]


def test_the_lock_step_measurement_is_estimated_before_it_starts(tmp_path, monkeypatch):
    """Issue 45: the first lock-step profile cost an unexplained 110 s. Its estimate: `repeats` forwards
    of B sequences of k tokens for every B and k, each priced as B batch-1 forwards of k tokens; and
    whether the forwards are already on disk (then nothing is measured)."""
    from libraspec import profiling

    base = LatencyProfile.from_linear(0.05, 0.002, 0.01, 7, 30)
    want = 5 * sum(B * (0.05 + 0.002 * k) for B in (1, 2, 4, 8) for k in range(1, 26))
    assert profiling.concurrency_estimate_s(base) == pytest.approx(want)
    assert profiling.concurrency_estimate_s(base, batches=(1, 2)) < want
    path = tmp_path / "p-concurrency.json"
    monkeypatch.setattr(profiling, "concurrency_path", lambda pair: str(path))
    assert not profiling.concurrency_stored(None)
    path.write_text('{"verify_s": {"1": [0.1], "2": [0.1]}}')  # too short and too few batch sizes
    assert not profiling.concurrency_stored(None)
    path.write_text(json.dumps({"verify_s": {str(b): [0.1] * 25 for b in (1, 2, 4, 8)}}))
    assert profiling.concurrency_stored(None)
    path.write_text("{damaged")
    assert not profiling.concurrency_stored(None)


def test_a_measurement_reports_its_progress_and_the_time_left(tmp_path, monkeypatch):
    """Issue 45: the cold start sat minutes on one line. `measure_profile` expects every timed call of its
    three parts at once and ticks each, so a status can say how far it is and about how long is left."""
    monkeypatch.setenv("LIBRASPEC_CACHE", str(tmp_path))
    pair = tiny_pair("llama", seed=0)
    progress = profiling.Progress()
    assert progress.line().endswith("s so far")  # nothing expected yet
    profile = profiling.cached_profile(pair, max_tokens=6, repeats=2, progress=progress)
    assert progress.total > 0 and progress.done == progress.total
    assert progress.line().startswith(f"{progress.total} of {progress.total} timings, about 0 s left")
    again = profiling.Progress()
    assert profiling.cached_profile(pair, max_tokens=6, repeats=2, progress=again) == profile  # read from disk
    assert again.total == again.done == 0
    halfway = profiling.Progress()
    halfway.expect(10)
    halfway.start -= 4.0  # 4 s for 2 of 10 calls: 16 s left at that pace
    halfway.tick(), halfway.tick()
    assert halfway.line() == "2 of 10 timings, about 16 s left"
