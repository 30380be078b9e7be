"""Measuring the latency profile on the models and machine at hand (docs/ARCHITECTURE.md, "What is timed").

T^verify_k: median wall time of one target forward with k new tokens over a realistic
context, k = 1..d_max + 1 (a round verifies [last token, d drafts]). T^draft_b: median
time of drafting b blocks in one round (pass b sees the b - 1 blocks drafted before it).
Profiles are cached on disk per model pair, machine and settings.

A machine's speed drifts (this project's 2-core VM, idle: an AR step took 95 ms, and 115 ms 70
minutes later), and timed one length after another, medians of neighbouring k differed there by
up to 35 ms in 125-160 ms. So the forwards
are timed in rounds that call every k once, in a shuffled order: drift becomes noise that the
median absorbs, instead of a tilt or step along k. Medians of neighbouring k still
wobble by several percent, so `verify_s` is `knot_fit` of the medians (a least-squares
piecewise-linear curve with knots at k = 1, 2, 4, 8, ..., made non-decreasing); other curves
are the monotone (isotonic) fit of their medians. The raw medians stay in `meta`. k = 1, the
AR step that every speedup divides by, is timed AR_COPIES times a round: its median rests on
more samples than any other k's.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import platform
import random
import statistics
import time

import numpy as np
import torch

from .cost import LatencyProfile
from .drafters.autoregressive import EagleDrafter
from .drafters.block import BlockDiffusionDrafter
from .drafters.lookup import LookupCalibration, LookupDrafter
from .files import atomic_write_text
from .models.target import crop_cache
from .paths import cache_root
from .verify import SamplingConfig


def monotone(values) -> tuple[float, ...]:
    """Least-squares non-decreasing fit (pool adjacent violators)."""
    blocks: list[list[float]] = []  # [mean, weight]
    for v in values:
        blocks.append([float(v), 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m2, w2), (m1, w1) = blocks.pop(), blocks.pop()
            blocks.append([(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2])
    return tuple(m for m, w in blocks for _ in range(int(w)))


def knot_fit(values) -> tuple[float, ...]:
    """values[k - 1] for k = 1..K smoothed: the least-squares piecewise-linear curve with knots at
    k = 1, 2, 4, 8, ... and K, kept within the measured range, then made non-decreasing
    (`monotone`).

    Each knot's value is fitted from the lengths around it, so one noisy median no longer makes
    a step that favours a particular length. The knot at 1 sees only k = 1, so the AR step keeps
    its own median; a curve that is linear between the knots comes back unchanged.
    """
    y = np.asarray(values, dtype=np.float64)  # (K,)
    last = len(y)
    knots = sorted({1, last} | {2**j for j in range(1, last.bit_length()) if 2**j < last})
    k = np.arange(1, last + 1)
    basis = np.stack([np.interp(k, knots, unit) for unit in np.eye(len(knots))], axis=1)  # (K, knots)
    weights, *_ = np.linalg.lstsq(basis, y, rcond=None)
    # one far median next to a knot (a loaded machine, one repeat) swings its neighbours below the
    # fastest measured time, even below zero: no fitted time leaves the range the medians span
    return monotone(np.clip(basis @ weights, y.min(), y.max()))


class Progress:
    """How far a measurement has come: timed calls expected and done, and the time left at the pace
    so far. One thread measures and ticks; another may read `line()` (a status) meanwhile."""

    def __init__(self):
        self.total, self.done, self.start = 0, 0, time.perf_counter()

    def expect(self, calls: int) -> None:
        self.total += int(calls)

    def tick(self) -> None:
        self.done += 1

    def line(self) -> str:
        """ "n of N timings, about s left" (the pace so far); the elapsed seconds before the first."""
        elapsed = time.perf_counter() - self.start
        if not self.done or not self.total:
            return f"{elapsed:.0f} s so far"
        left = elapsed * max(self.total - self.done, 0) / self.done
        return f"{self.done} of {self.total} timings, about {left:.0f} s left"


def _calls_timed(calls: dict, repeats: int, copies: dict | None = None) -> int:
    """How many timed calls `timed_interleaved` makes for these arguments (what a `Progress` expects)."""
    return (repeats + 1) * sum((copies or {}).get(key, 1) for key in calls)


def timed_interleaved(
    calls: dict,
    repeats: int,
    sync=lambda: None,
    after=None,
    seed: int = 0,
    copies: dict | None = None,
    progress: Progress | None = None,
) -> dict:
    """Median seconds of each call in `calls` ({key: fn}), timed over repeats + 1 rounds that call
    each once in a shuffled order (the first round warms up and is dropped); `copies` ({key: c})
    calls a key c times a round, pooling its c x repeats samples; `sync` waits for the device,
    and `after`, if given, runs untimed before each call (what precedes it in a round); `progress`
    ticks once per timed call."""
    copies = copies or {}
    order, rng = [key for key in calls for _ in range(copies.get(key, 1))], random.Random(seed)
    samples: dict = {key: [] for key in calls}
    for _ in range(repeats + 1):
        rng.shuffle(order)
        for key in order:
            if after is not None:
                after()
            sync()
            start = time.perf_counter()
            calls[key]()
            sync()
            samples[key].append(time.perf_counter() - start)
            if progress is not None:
                progress.tick()
    return {key: statistics.median(times[copies.get(key, 1) :]) for key, times in samples.items()}


def machine_description() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    info = {
        "cpu": cpu,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "python": platform.python_version(),
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


PROFILE_TOLERANCE = 0.25  # measured / profile AR time this far (relative) from 1: the profile is measured again
TREE_ROWS = (2, 9, 17, 33, 65)  # root + 1, 8, 16, 32 and 64 nodes: the node budgets people try here
# The one-token forward is the AR step, the baseline every speedup divides by: it is timed this many times
# a round (pooled), so its median rests on 4x the samples of any other k
AR_COPIES = 4
# The context term: forwards of CONTEXT_K rows (those <= max_tokens, and max_tokens) timed after these
# contexts besides c0, from short prompts to the longest prompts plus outputs a race here takes
# (ui/settings: 2,048 prompt tokens on a CPU); longer contexts continue the last segment's slope
CONTEXTS = (128, 256, 1024, 2048)
CONTEXT_K = (1, 2, 4, 8, 16)
# c0, the context the tables are timed after: the shortest the prompts here have (a chat template alone is
# ~30 tokens), so no context term is ever extrapolated below a timed context
CONTEXT_LEN = 32
# lock-step forwards are timed after this context (a typical prompt and half its 128-token answer) and
# priced there, without a context term
LOCKSTEP_CONTEXT = 256


@torch.inference_mode()
def measure_profile(
    pair,
    max_tokens: int = 25,
    max_blocks: int = 2,
    context_len: int = CONTEXT_LEN,
    repeats: int = 7,
    tree_rows: tuple[int, ...] = TREE_ROWS,
    contexts: tuple[int, ...] = CONTEXTS,
    progress: Progress | None = None,
) -> LatencyProfile:
    """Median seconds of target forwards with 1..max_tokens new tokens, of 1..max_blocks drafts, of a
    look-up step, of the block-diffusion drafter's context upkeep after a round (`fit_s`), of the
    pair's EAGLE-style head if it has one (a step, `eagle_s`, and its upkeep, `eagle_fit_s`) and of
    draft-tree verifications of `tree_rows` rows (a 4-ary tree, best-first order, with its mask),
    all after `context_len` tokens; then the context term (`context_term`) from forwards after
    `contexts` tokens. `progress` expects every timed call of the three parts at once and ticks them."""
    target, drafter = pair.target, BlockDiffusionDrafter(pair.drafter, pair.target)
    context_len = max(2, min(context_len, target.max_positions - max_tokens - 1))
    context, cache, out = _timing_context(target, context_len)
    dcontext = drafter.new_context()
    drafter.fit_context(dcontext, context, out.hidden_states, 0)
    sync = _sync(target)
    verify = functools.partial(_verify, target, cache, context)

    def draft(blocks: int) -> None:
        drafter.start_round(dcontext, context, SamplingConfig()).extend(blocks)

    # a look-up step over text that repeats itself, so it finds and follows matches
    lookup = LookupDrafter(drafter.n, target.vocab_size, LookupCalibration.neutral())
    repeated = (context[:32] * (context_len // 32 + 1))[:context_len]
    index = lookup.new_context()
    lookup.fit_context(index, repeated, None, 0)

    def fit(k: int, hidden) -> None:  # the drafter's context takes k committed tokens, then gives them back
        drafter.fit_context(dcontext, context + context[:k], hidden, context_len - 1)
        drafter.fit_context(dcontext, context, None, None)

    k_fit = max(1, drafter.n // 2)  # a typical round's committed tokens
    fit_hidden = target.forward(cache, context[-1:] + context[: k_fit - 1]).hidden_states
    crop_cache(cache, context_len - 1)
    head_calls = {}
    if getattr(pair, "eagle", None) is not None:
        head = EagleDrafter(pair.eagle, target)
        hcontext = head.new_context()
        head.fit_context(hcontext, context, out.hidden_states, 0)

        def head_fit(k: int, hidden) -> None:
            head.fit_context(hcontext, context + context[:k], hidden, context_len - 1)
            head.fit_context(hcontext, context, None, None)

        head_calls = {
            "eagle": lambda: head.start_round(hcontext, context, SamplingConfig()).extend(1),
            "eagle_fit": lambda: head_fit(k_fit, fit_hidden),
        }

    def verify_tree(rows: int) -> None:
        nodes = rows - 1
        parents = [j // 4 - 1 for j in range(nodes)]  # children of the root first, then 4 per node
        depths = []
        for parent in parents:
            depths.append(1 if parent < 0 else depths[parent] + 1)
        target.forward_tree(cache, context[-1], [context[j % len(context)] for j in range(nodes)], parents, depths)
        crop_cache(cache, context_len - 1)

    lengths = range(1, max_tokens + 1)
    tree_rows = tuple(k for k in tree_rows if k + context_len < target.max_positions)
    tree_rows = tree_rows if len(tree_rows) > 1 else ()  # one row count makes no interpolation
    chain_calls = {
        **{("chain", k): functools.partial(verify, k) for k in lengths},
        **{("tree", k): functools.partial(verify_tree, k) for k in tree_rows},
    }
    step_keys = [("draft", b) for b in range(1, max_blocks + 1)] + ["lookup", "fit"] + list(head_calls)
    if progress is not None:  # the whole measurement's timed calls, so the time left is for all of it
        cs, ks = _context_plan(target, context_len, contexts, max_tokens)
        progress.expect(_calls_timed(chain_calls, repeats, {("chain", 1): AR_COPIES}))
        progress.expect(_calls_timed(dict.fromkeys(step_keys), repeats))
        progress.expect(
            _calls_timed(dict.fromkeys((c, k) for c in ([context_len] + cs if cs else []) for k in ks), repeats)
        )
    forwards = timed_interleaved(chain_calls, repeats, sync, copies={("chain", 1): AR_COPIES}, progress=progress)
    verify_s = tuple(forwards["chain", k] for k in lengths)
    tree_s = tuple(forwards["tree", k] for k in tree_rows)
    # in a round, drafting and the context upkeep follow a target forward, which leaves the CPU's
    # caches full of the target's weights: each is timed right after one
    after_forward = functools.partial(verify, drafter.n)
    steps = timed_interleaved(
        {
            **{("draft", b): functools.partial(draft, b) for b in range(1, max_blocks + 1)},
            "lookup": lambda: lookup.start_round(index, repeated, SamplingConfig()).extend(1),
            "fit": lambda: fit(k_fit, fit_hidden),
            **head_calls,
        },
        repeats,
        sync,
        after_forward,
        progress=progress,
    )
    draft_s = tuple(steps["draft", b] for b in range(1, max_blocks + 1))
    lookup_s, fit_s = steps["lookup"], steps["fit"]
    meta = {
        "pair": pair.name,
        "context_len": context_len,
        "repeats": repeats,
        "raw_verify_s": list(verify_s),
        "raw_draft_s": list(draft_s),
        "device": str(target.device),
        "dtype": str(target.dtype),
        **machine_description(),
    }
    meta["raw_tree_verify_s"] = list(tree_s)
    meta["verify_fit"] = "knot_fit of medians timed interleaved"
    context_k, slopes, points, extra, meta["context_fit"] = context_term(
        target, context_len, contexts, max_tokens, repeats, progress
    )
    return LatencyProfile(
        verify_s=knot_fit(verify_s),
        draft_s=monotone(draft_s),
        n=drafter.n,
        meta=meta,
        lookup_s=lookup_s,
        fit_s=fit_s,
        eagle_s=steps.get("eagle", 0.0),
        eagle_fit_s=steps.get("eagle_fit", 0.0),
        tree_rows=tree_rows,
        tree_verify_s=monotone(tree_s) if tree_rows else (),
        context_len=context_len if context_k else 0,
        context_k=context_k,
        context_slope_s=slopes,
        context_points=points,
        context_extra_s=extra,
    )


def _context_plan(target, context_len: int, contexts, max_tokens: int) -> tuple[list[int], list[int]]:
    """(the contexts beyond c0 the target's window holds, the rows k) that `context_term` times."""
    cs = [c for c in sorted(set(contexts)) if c > context_len and c + max_tokens < target.max_positions]
    ks = sorted({k for k in CONTEXT_K if k <= max_tokens} | {max_tokens})
    return cs, ks


@torch.inference_mode()
def context_term(
    target, context_len: int, contexts, max_tokens: int, repeats: int = 5, progress: Progress | None = None
):
    """(rows k, slopes, points, extra, fit): forwards of k rows (CONTEXT_K up to max_tokens, and
    max_tokens) timed interleaved after `context_len` tokens (c0) and after each of `contexts` beyond
    it (those the target's window holds). Per k, the extra seconds over c0 at each longer context are
    made non-decreasing in the context (`monotone`, c0's 0 first) and at least 0, then non-decreasing
    in k; the slope beyond the longest context continues the last segment (`cost.LatencyProfile`'s
    context term). `fit` holds the medians in ms and the largest relative error of the model at the
    timed points."""
    cs, ks = _context_plan(target, context_len, contexts, max_tokens)
    if not cs:
        return (), (), (), (), {"contexts": [context_len], "note": "no longer context fits the target's window"}
    calls = {}
    for c in [context_len] + cs:
        context, cache, _ = _timing_context(target, c)
        calls.update({(c, k): functools.partial(_verify, target, cache, context, k) for k in ks})
    medians = timed_interleaved(calls, repeats, _sync(target), progress=progress)
    del calls
    return fit_context_term(context_len, cs, ks, medians)


def fit_context_term(context_len: int, contexts, ks, medians: dict):
    """`context_term`'s fit of the medians {(c, k): seconds} timed after c0 = `context_len` and each of
    `contexts` (rising, beyond c0) for the rows `ks`: per k the extra seconds over c0, made
    non-decreasing in the context (`monotone`, c0's 0 first) and at least 0, then non-decreasing in
    k; the slope beyond the longest context continues the last segment, made non-decreasing in k.
    Returns (ks, slopes, points, extra, fit) as `cost.LatencyProfile` takes them."""
    cs, ks = list(contexts), list(ks)
    # (contexts, k): extra seconds over c0, rising with the context (c0's zero anchors the fit)
    by_k = [monotone([0.0] + [medians[c, k] - medians[context_len, k] for c in cs])[1:] for k in ks]
    extra = np.maximum(np.array(by_k, dtype=np.float64).T, 0.0)  # (len(cs), len(ks))
    extra = np.maximum.accumulate(extra, axis=1)  # and rising with k
    below = extra[-2] if len(cs) > 1 else np.zeros(len(ks))
    last = (cs[-2] if len(cs) > 1 else context_len, cs[-1])
    slopes = np.maximum.accumulate(np.maximum((extra[-1] - below) / (last[1] - last[0]), 0.0))
    errors = [
        abs(medians[context_len, k] + extra[i, j] - medians[c, k]) / medians[c, k]
        for i, c in enumerate(cs)
        for j, k in enumerate(ks)
    ]
    fit = {
        "contexts": [context_len] + cs,
        "k": ks,
        "median_ms": {str(c): [round(1000 * medians[c, k], 3) for k in ks] for c in [context_len] + cs},
        "extra_ms": {str(c): [round(1000 * v, 4) for v in extra[i]] for i, c in enumerate(cs)},
        "slope_us_per_token": [round(1e6 * v, 4) for v in slopes],
        "max_relative_error": round(max(errors), 4),
        "model": (
            "T(k, c) = T(k, c0) + extra(k, c): 0 up to c0 (the shortest context timed), linear between the timed "
            "contexts, the last slope beyond; rising in k and c"
        ),
    }
    points = tuple(cs)
    return tuple(ks), tuple(float(v) for v in slopes), points, tuple(tuple(map(float, row)) for row in extra), fit


@torch.inference_mode()
def measure_concurrency(
    target, batches=(1, 2, 4, 8), max_tokens: int = 17, context_len: int = 256, repeats: int = 5
) -> dict[int, list[float]]:
    """{B: [median seconds of one forward over B sequences of k new tokens, k = 1..max_tokens]}: the
    verification of B requests in one batch, each after its own context of `context_len` tokens (a
    lock-step round of B requests that each verify d = k - 1 drafts). Timed interleaved like
    `measure_profile`, the cache cropped back after every call."""
    from transformers import DynamicCache

    model, device = target.model, target.device
    gen = torch.Generator().manual_seed(0)
    out, sync = {}, _sync(target)
    for B in batches:
        context = torch.randint(0, target.vocab_size, (B, context_len), generator=gen).to(device)
        cache = DynamicCache()
        model(input_ids=context[:, :-1], past_key_values=cache, use_cache=True)
        new = torch.randint(0, target.vocab_size, (B, max_tokens), generator=gen).to(device)
        positions = torch.arange(context_len - 1, context_len - 1 + max_tokens, device=device).expand(B, -1)

        def forward(k: int) -> None:
            model(
                input_ids=new[:, :k],
                past_key_values=cache,
                position_ids=positions[:, :k],
                use_cache=True,
                logits_to_keep=k,
            )
            crop_cache(cache, context_len - 1)

        times = timed_interleaved({k: functools.partial(forward, k) for k in range(1, max_tokens + 1)}, repeats, sync)
        out[int(B)] = [times[k] for k in range(1, max_tokens + 1)]
    return out


def _timing_context(target, context_len: int):
    """(context, cache, output): a fixed random context of `context_len` tokens, all but the last in the cache."""
    gen = torch.Generator().manual_seed(0)
    context = torch.randint(0, target.vocab_size, (context_len,), generator=gen).tolist()
    cache = target.new_cache()
    return context, cache, target.forward(cache, context[:-1])


def _verify(target, cache, context: list[int], k: int) -> None:
    """A target forward of k new tokens after the context, then the cache back to the context."""
    target.forward(cache, context[-1:] + context[: k - 1])
    crop_cache(cache, len(context) - 1)


def _sync(target):
    return torch.cuda.synchronize if target.device.type == "cuda" else (lambda: None)


@torch.inference_mode()
def ar_step_now(pair, context_len: int, repeats: int = 15) -> float:
    """The profile's AR step (a one-token forward after `context_len` tokens) timed now: median seconds."""
    context, cache, _ = _timing_context(pair.target, context_len)
    step = functools.partial(_verify, pair.target, cache, context, 1)
    return timed_interleaved({"ar": step}, repeats, _sync(pair.target))["ar"]


def ar_check_now(pair, profile: LatencyProfile, context_len: int = CONTEXT_LEN) -> dict:
    """`ar_check` of the profile's AR step timed now (`ar_step_now`) after the context the profile was
    timed at (`context_len` for a profile that names none): does it still describe this machine?"""
    c0 = profile.context_len or int(profile.meta.get("context_len", context_len))
    return ar_check(ar_step_now(pair, c0), profile.ar_token_time())


def profile_path(pair) -> str:
    """One profile file per model pair, drafter weights, device, dtype and machine."""
    key = {
        "format": 8,  # 7: the context term; 8: tables after CONTEXT_LEN, the context term piecewise over CONTEXTS
        "pair": pair.name,
        "drafter": pair.drafter_id,
        "device": str(pair.target.device),
        "dtype": str(pair.target.dtype),
        **machine_description(),
    }
    if getattr(pair, "eagle_id", ""):  # a pair with an EAGLE-style head: its timings are in the profile
        key["eagle"] = pair.eagle_id
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return os.path.join(cache_root(), "profiles", f"{pair.name}-{digest}.json")  # paths.cache_root


def cached_profile(
    pair,
    max_tokens: int = 25,
    max_blocks: int = 2,
    context_len: int = CONTEXT_LEN,
    repeats: int = 7,
    refresh: bool = False,
    check: bool = False,
    progress: Progress | None = None,
) -> LatencyProfile:
    """`measure_profile`, cached in one file per pair and machine (`profile_path`); `progress` follows
    a measurement (nothing is expected when the file answers).

    A cached profile that reaches fewer tokens or blocks than asked for is measured again
    over the larger of both ranges and replaces the file; so does a damaged one. With `check`,
    the cached profile's AR step is compared with one timed now (`ar_step_now`): more than
    PROFILE_TOLERANCE apart, it was measured under another load (or the machine's speed has
    moved), and it is measured again. The returned profile's meta["load_check"] says what was found.
    """
    path = profile_path(pair)
    found = None
    if not refresh and os.path.exists(path):
        try:
            cached = LatencyProfile.from_json(path)
            if len(cached.verify_s) >= max_tokens and len(cached.draft_s) >= max_blocks:
                if not check:
                    return cached
                found = ar_check_now(pair, cached, context_len)
                if found["ok"]:
                    cached.meta["load_check"] = found | {"remeasured": False}
                    return cached
            max_tokens, max_blocks = max(max_tokens, len(cached.verify_s)), max(max_blocks, len(cached.draft_s))
        except (ValueError, KeyError, json.JSONDecodeError):
            pass  # a damaged profile is measured again and overwritten
    profile = measure_profile(pair, max_tokens, max_blocks, context_len, repeats, progress=progress)
    profile.to_json(path)
    if found is not None:
        profile.meta["load_check"] = found | {"remeasured": True}
    return profile


def profile_reaching(pair, d_max: int, **options) -> LatencyProfile:
    """`cached_profile` far enough for verifying up to `d_max` drafts: d_max + 1 rows (at least the
    default 25) and the drafting steps d_max needs (at least 2). `options` go to `cached_profile`."""
    return cached_profile(pair, max_tokens=max(25, d_max + 1), max_blocks=max(2, -(-d_max // pair.n)), **options)


def concurrency_path(pair) -> str:
    """Where `cached_concurrency` keeps a pair's lock-step forwards: beside its batch-1 profile."""
    return profile_path(pair).replace(".json", "-concurrency.json")


def _stored_concurrency(path: str, batches, max_tokens: int) -> dict[int, list[float]] | None:
    """The stored forwards when they cover `batches` and `max_tokens`; None when missing, short or damaged."""
    if not os.path.exists(path):
        return None
    try:
        with open(path) as handle:
            data = {int(b): list(v) for b, v in json.load(handle)["verify_s"].items()}
    except (ValueError, KeyError, TypeError, json.JSONDecodeError):
        return None  # a damaged file is measured again
    if not set(batches) <= set(data) or min(len(v) for v in data.values()) < max_tokens:
        return None
    return data


def concurrency_stored(pair, batches=(1, 2, 4, 8), max_tokens: int = 25) -> bool:
    """Whether `cached_concurrency` would read the pair's lock-step forwards from disk (no measuring)."""
    return _stored_concurrency(concurrency_path(pair), batches, max_tokens) is not None


def concurrency_estimate_s(base: LatencyProfile, batches=(1, 2, 4, 8), max_tokens: int = 25, repeats: int = 5) -> float:
    """About how long measuring the lock-step forwards takes: `repeats` forwards of B sequences of k
    tokens for every B and k, a forward of B sequences priced as B batch-1 forwards of k tokens (a
    CPU's cost grows about linearly with the tokens it verifies); an estimate to announce, not a price."""
    return repeats * sum(B * base.verify_time(k) for B in batches for k in range(1, max_tokens + 1))


def cached_concurrency(
    pair, batches=(1, 2, 4, 8), max_tokens: int = 25, repeats: int = 5, refresh: bool = False
) -> dict[int, LatencyProfile]:
    """{B: the batch-1 profile with verify_s replaced by one forward over B sequences of k new tokens}
    (`measure_concurrency`, knot-fitted like `measure_profile`), cached beside the batch-1 profile.
    Drafting, look-up and upkeep keep their batch-1 times (a batched drafter is not timed here):
    meta["batch"] and meta["drafting"] say so. The forwards are timed after LOCKSTEP_CONTEXT tokens
    and carry no context term (lock-step rounds are priced at that context)."""
    base = cached_profile(pair)
    path = concurrency_path(pair)
    data = None if refresh else _stored_concurrency(path, batches, max_tokens)
    if data is None:
        data = measure_concurrency(pair.target, batches, max_tokens, LOCKSTEP_CONTEXT, repeats)
        atomic_write_text(path, json.dumps({"verify_s": {str(b): v for b, v in data.items()}, "repeats": repeats}))
    no_context_term = dict(context_k=(), context_slope_s=(), context_points=(), context_extra_s=())
    return {
        B: dataclasses.replace(
            base,
            verify_s=knot_fit(times),
            context_len=LOCKSTEP_CONTEXT,
            **no_context_term,
            meta=base.meta
            | {
                "batch": B,
                "drafting": "batch-1 times",
                "raw_verify_s": list(times),
                "context_len": LOCKSTEP_CONTEXT,
                "context": f"forwards timed after {LOCKSTEP_CONTEXT} tokens each, priced there at every context",
            },
        )
        for B, times in sorted(data.items())
    }


def within(ratio: float, tolerance: float) -> bool:
    """Whether a measured / modeled ratio is at most `tolerance` (relative) from 1: the one rule
    for "the profile describes this run" (`profile_check`, the app's post-race load check)."""
    return abs(ratio - 1.0) <= tolerance


def ar_check(measured_ar_s: float, profile_ar_s: float, tolerance: float = PROFILE_TOLERANCE) -> dict:
    """Does the profile still describe this machine? Compares an AR step measured now with the
    profile's at the same context; `ok` is False beyond `tolerance` (relative), which means the
    profile was measured under another load and should be measured again."""
    ratio = measured_ar_s / profile_ar_s
    return {
        "measured_ar_s": measured_ar_s,
        "profile_ar_s": profile_ar_s,
        "ratio": ratio,
        "ok": within(ratio, tolerance),
    }


def profile_check(profile: LatencyProfile, ar_records, tolerance: float = PROFILE_TOLERANCE) -> dict:
    """`ar_check` with the AR seconds per token that records measured, against the profile's AR
    step after the context each of them saw: a long prompt's slower steps are priced, not taken
    for load."""
    tokens = sum(r.tau for r in ar_records)
    if not tokens:
        raise ValueError("no AR tokens to check the profile against")
    modeled = sum(profile.ar_token_time(r.start_position) for r in ar_records)
    return ar_check(sum(r.measured_s for r in ar_records) / tokens, modeled / tokens, tolerance)
