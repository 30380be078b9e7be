"""Latency profile: the modeled cost of a round (paper Eq. 1; docs/ARCHITECTURE.md, "What is timed").

A round drafts ceil(d / n) blocks (T^draft_d) and lets the target verify
[last token, d drafts], a forward with d + 1 new tokens (T^verify_d). The modeled
time of a round is `LatencyProfile.round_time(d)`; autoregressive decoding costs
`ar_token_time()` per token. `linear_fit` gives the paper's per-position verification
cost c (section 3.3), used to set alpha (section 3.4, `theory.alpha_from_costs`).

This module is the model side only: the numbers come from measurements on this
machine (`profiling.measure_profile`, cached per machine and pair by `profiling.cached_profile`);
nothing here makes numbers up.
"""

from __future__ import annotations

import bisect
import json
import math
from dataclasses import dataclass, field

import numpy as np

from .files import atomic_write_text

DIFFUSION, LOOKUP, EAGLE = "dflash", "lookup", "eagle"  # the sources of a drafting step (`DraftBuffer.step_sources`)
SOURCES = (DIFFUSION, LOOKUP, EAGLE)


@dataclass(frozen=True)
class Drafting:
    """How a round that did not run drafts (theory, the step-through): the source kept at each
    step (`kept`, the last one repeating beyond), the proposals made within a step and not used
    ((step, source), as `DraftBuffer.discarded`), whether the drafter's context upkeep follows, the
    passes each block-diffusion step runs (`passes`: 1, or an iterative drafter's count) and the
    drafts a step makes (`n`: 0 for the profile's n, 1 for an autoregressive head)."""

    kept: tuple[str, ...] = (DIFFUSION,)
    discarded: tuple[tuple[int, str], ...] = ()
    needs_features: bool = True
    passes: int = 1
    n: int = 0

    def __post_init__(self):
        sources = SOURCES
        if not self.kept or any(source not in sources for source in self.kept):
            raise ValueError(f"a round's kept sources are one or more of {sources}, got {self.kept!r}")
        if any(step < 0 or source not in sources for step, source in self.discarded):
            raise ValueError(f"discarded proposals are (step >= 0, one of {sources}), got {self.discarded!r}")
        if isinstance(self.passes, bool) or not isinstance(self.passes, int) or self.passes < 1:
            raise ValueError(f"a block-diffusion step runs passes >= 1, got {self.passes!r}")
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 0:
            raise ValueError(f"drafts per step n is >= 1, or 0 for the profile's, got {self.n!r}")

    def steps(self, blocks: int) -> list[str]:
        """Every step the round's first `blocks` steps run, as `DraftBuffer.steps_run` lists them
        (an iterative step's passes before its last as its proposals not used)."""
        kept = [self.kept[min(b, len(self.kept) - 1)] for b in range(int(blocks))]
        earlier = [DIFFUSION] * ((self.passes - 1) * kept.count(DIFFUSION))
        return kept + [source for step, source in self.discarded if step < blocks] + earlier


BLOCK_DIFFUSION = Drafting()  # every step a block-diffusion pass, upkeep after the round
LOOK_UP = Drafting((LOOKUP,), needs_features=False)  # every step a look-up, no upkeep
AUTOREGRESSIVE = Drafting((EAGLE,), n=1)  # every step one token of the EAGLE-style head, its upkeep after


def _check_times(values, name: str, minimum: int) -> tuple[float, ...]:
    times = tuple(float(v) for v in values)
    if len(times) < minimum:
        raise ValueError(f"{name} needs at least {minimum} time(s), got {len(times)}")
    if not all(math.isfinite(t) and t > 0 for t in times):
        raise ValueError(f"{name} must hold finite times > 0 seconds")
    return times


def _falls(values) -> bool:
    return any(b < a for a, b in zip(values, values[1:]))


def _extrapolate(times: tuple[float, ...], x: int, first_x: int) -> float:
    """times[k] is the time at x = first_x + k; beyond the end continue the last segment.

    The slope is clamped at 0 so measurement noise cannot make far lengths cheaper.
    """
    last = first_x + len(times) - 1
    if x <= last:
        return times[x - first_x]
    slope = max(times[-1] - times[-2], 0.0)
    return times[-1] + slope * (x - last)


@dataclass(frozen=True)
class LatencyProfile:
    """Median seconds per target forward and per drafting, measured on one machine.

    verify_s[k-1]: target forward with k new tokens, k = 1..K (K >= 2).
    draft_s[b-1]: drafting b blocks of n tokens in one round, b = 1..len(draft_s).
    lookup_s: one look-up drafting step (a suffix match and its continuation).
    fit_s: bringing a block-diffusion drafter's context up to date after a verification (the
    target features of the committed tokens projected into its cache), once per round.
    eagle_s, eagle_fit_s: one drafting step of the EAGLE-style head (one token) and its context
    upkeep once per round (the committed tokens' features through its layer); 0 when the pair
    has no head or the profile was measured before heads were timed (pricing a head round then
    raises: re-measure).
    tree_verify_s[j]: verifying a draft tree of tree_rows[j] rows (root + nodes) in one forward with
    its 4-D attention mask; empty in profiles measured before trees were timed (then a tree costs
    a chain forward of as many rows).

    The tables above were timed after a context of `context_len` tokens (c0), the shortest context
    timed. A target forward of k rows after c tokens costs `context_s(k, c)` more (the context
    term, `profiling.context_term`): 0 up to c0 (no slope is extrapolated below the shortest timed
    context), then linear between the longer contexts timed (`context_points`, with
    `context_extra_s[i][j]` the extra seconds after context_points[i] for the rows context_k[j]),
    then the last segment's slope `context_slope_s` beyond the longest (without points: the slope
    from c0 on). Rows between the measured `context_k` are interpolated, rows beyond them held
    flat. The extra seconds rise with the rows and with the context, so a forward of more rows or
    after a longer context never costs less (`__post_init__` refuses a term that would).
    Drafting, look-up and upkeep carry no context term (the drafter's pass took 4.9 ms after
    256 tokens and 5.3 ms after 2,048 on this project's CPU). Without `context_k` (synthetic
    profiles, files written before contexts were timed) a forward costs the same after any context.
    """

    verify_s: tuple[float, ...]
    draft_s: tuple[float, ...]
    n: int  # drafts per drafting step (a block)
    meta: dict = field(default_factory=dict, compare=False)  # machine, models, context, repeats
    lookup_s: float = 0.0
    fit_s: float = 0.0
    eagle_s: float = 0.0
    eagle_fit_s: float = 0.0
    tree_rows: tuple[int, ...] = ()
    tree_verify_s: tuple[float, ...] = ()
    context_len: int = 0  # c0: the context the tables were timed after (0: not recorded)
    context_k: tuple[int, ...] = ()  # rows of the forwards whose context slope was measured
    context_slope_s: tuple[float, ...] = ()  # seconds per context token beyond the longest timed, at each context_k
    context_points: tuple[int, ...] = ()  # contexts timed beyond c0, rising
    context_extra_s: tuple[tuple[float, ...], ...] = ()  # [point][row]: seconds over the forward after c0

    def __post_init__(self):
        object.__setattr__(self, "verify_s", _check_times(self.verify_s, "verify_s", 2))
        object.__setattr__(self, "draft_s", _check_times(self.draft_s, "draft_s", 1))
        n = self.n
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"n must be an integer >= 1, got {n!r}")
        object.__setattr__(self, "n", int(n))
        for name in ("lookup_s", "fit_s", "eagle_s", "eagle_fit_s"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) >= 0):
                raise ValueError(f"{name} must be a finite time >= 0, got {getattr(self, name)!r}")
        object.__setattr__(self, "meta", dict(self.meta))
        rows = tuple(int(k) for k in self.tree_rows)
        if len(rows) != len(self.tree_verify_s) or len(rows) == 1:
            raise ValueError(
                f"tree_rows and tree_verify_s need the same length, 0 or >= 2 "
                f"({len(rows)} and {len(self.tree_verify_s)})"
            )
        if rows and (rows[0] < 2 or any(b <= a for a, b in zip(rows, rows[1:]))):
            raise ValueError(f"tree_rows must rise from at least 2, got {rows}")
        object.__setattr__(self, "tree_rows", rows)
        object.__setattr__(self, "tree_verify_s", _check_times(self.tree_verify_s, "tree_verify_s", 0))
        ks, slopes = tuple(int(k) for k in self.context_k), tuple(float(s) for s in self.context_slope_s)
        if len(ks) != len(slopes) or (ks and (ks[0] < 1 or any(b <= a for a, b in zip(ks, ks[1:])))):
            raise ValueError(f"context_k must rise from 1 and match context_slope_s in length, got {ks} and {slopes}")
        if not all(math.isfinite(v) and v >= 0 for v in slopes) or _falls(slopes):
            raise ValueError(f"context_slope_s must hold finite slopes >= 0 that never fall with k, got {slopes}")
        if ks and int(self.context_len) < 1:
            raise ValueError("a context term needs the context_len its tables were timed after")
        points = tuple(int(c) for c in self.context_points)
        extra = tuple(tuple(float(v) for v in row) for row in self.context_extra_s)
        if len(points) != len(extra) or any(len(row) != len(ks) for row in extra) or (points and not ks):
            raise ValueError("context_extra_s needs one row per context point and one value per context_k")
        if any(b <= a for a, b in zip((int(self.context_len),) + points, points)):
            raise ValueError(f"context_points must rise beyond context_len {self.context_len}, got {points}")
        rows = ((0.0,) * len(ks),) + extra  # c0, then each point
        if not all(math.isfinite(v) and v >= 0 for row in extra for v in row) or any(map(_falls, extra)):
            raise ValueError("context_extra_s must hold finite seconds >= 0 that never fall with k")
        if any(b < a for lower, upper in zip(rows, rows[1:]) for a, b in zip(lower, upper)):
            raise ValueError("context_extra_s must never fall with the context")
        object.__setattr__(self, "context_len", int(self.context_len))
        object.__setattr__(self, "context_k", ks)
        object.__setattr__(self, "context_slope_s", slopes)
        object.__setattr__(self, "context_points", points)
        object.__setattr__(self, "context_extra_s", extra)

    def context_s(self, k: int, context: int | None) -> float:
        """What a forward of k rows costs after `context` tokens beyond what it costs after c0: 0
        without a context term, a context, or for a context up to c0; linear between the timed
        contexts, the last slope beyond them (class docstring). Never negative, never falling in
        k or in the context."""
        if context is None or not self.context_k or int(context) <= self.context_len:
            return 0.0
        c = int(context)
        points = (self.context_len,) + self.context_points
        if c >= points[-1]:
            last = float(np.interp(k, self.context_k, self.context_extra_s[-1])) if self.context_points else 0.0
            return last + (c - points[-1]) * float(np.interp(k, self.context_k, self.context_slope_s))
        i = bisect.bisect_right(points, c)  # points[i - 1] <= c < points[i]
        lo = float(np.interp(k, self.context_k, self.context_extra_s[i - 2])) if i >= 2 else 0.0
        hi = float(np.interp(k, self.context_k, self.context_extra_s[i - 1]))
        return lo + (hi - lo) * (c - points[i - 1]) / (points[i] - points[i - 1])

    def verify_time(self, k: int, context: int | None = None) -> float:
        """Target forward with k >= 1 new tokens (after `context` tokens; None: c0); linear beyond
        the measured K."""
        if k < 1:
            raise ValueError(f"verification needs k >= 1 new tokens, got {k}")
        return _extrapolate(self.verify_s, int(k), 1) + self.context_s(k, context)

    def tree_verify_time(self, k: int, context: int | None = None) -> float:
        """Verifying a tree of k rows (root + k - 1 nodes) in one forward (after `context` tokens;
        None: c0): linear between the measured row counts, the last segment continued beyond them
        (never falling), never below the chain forward of one row fewer than the smallest tree, and
        the chain forward `verify_time(k)` below the smallest one or without tree timings."""
        rows = self.tree_rows
        if not rows or k < rows[0]:
            return self.verify_time(k, context)
        if k >= rows[-1]:
            slope = max((self.tree_verify_s[-1] - self.tree_verify_s[-2]) / (rows[-1] - rows[-2]), 0.0)
            tree = self.tree_verify_s[-1] + slope * (k - rows[-1])
        else:
            tree = float(np.interp(k, rows, self.tree_verify_s))
        return max(tree, _extrapolate(self.verify_s, rows[0] - 1, 1)) + self.context_s(k, context)

    def draft_time(self, blocks: int) -> float:
        """Drafting `blocks` blocks in one round (0 blocks cost 0); linear beyond the table."""
        if blocks < 0:
            raise ValueError(f"blocks must be >= 0, got {blocks}")
        if blocks == 0:
            return 0.0
        return _extrapolate((0.0,) + self.draft_s, int(blocks), 0)  # (0, 0) anchors one entry

    def round_time(self, d: int, drafting: Drafting = BLOCK_DIFFUSION) -> float:
        """A chain round of d drafts: T^draft_d + T^verify_d + the drafter's context upkeep, with
        ceil(d / n) steps (at least one) drafted as `drafting` says (block diffusion by default;
        `LOOK_UP`; a hybrid round's own mix) and d + 1 verified tokens (`chain_round_s`)."""
        if d < 1:
            raise ValueError(f"speculative length d must be >= 1, got {d}")
        if not isinstance(drafting, Drafting):
            raise ValueError(f"a round's drafting is a cost.Drafting, got {drafting!r}")
        steps = drafting.steps(max(1, -(-int(d) // (drafting.n or self.n))))
        return chain_round_s(self, steps, int(d), needs_features=drafting.needs_features)

    def ar_token_time(self, context: int | None = None) -> float:
        """Autoregressive seconds per token: one target forward with one new token (after
        `context` tokens; None: c0)."""
        return self.verify_s[0] + self.context_s(1, context)

    def linear_fit(self) -> tuple[float, float]:
        """Least squares verify_s[k-1] ~ t0 + c * k; c is the paper's cost per position."""
        k = np.arange(1, len(self.verify_s) + 1, dtype=np.float64)
        c, t0 = np.polyfit(k, np.asarray(self.verify_s), 1)
        return float(t0), float(c)

    @classmethod
    def from_linear(
        cls, t0: float, c: float, draft_per_block: float, n: int, max_tokens: int, meta: dict | None = None
    ) -> "LatencyProfile":
        """A synthetic profile: verify t0 + c * k for k = 1..max_tokens, draft b * draft_per_block.

        For theory and tests (the teaching view); measured profiles come from real models. A head
        step of the EAGLE-style drafter is priced as one drafting pass (`eagle_s` = draft_per_block),
        its upkeep as the block drafter's (none).
        """
        if max_tokens < 2:
            raise ValueError(f"max_tokens must be >= 2, got {max_tokens}")
        if not (math.isfinite(c) and c >= 0):
            raise ValueError(f"per-token cost c must be finite and >= 0, got {c}")
        blocks = max(1, -(-int(max_tokens) // int(n)))
        info = {"source": "linear", "t0": t0, "c": c, "draft_per_block": draft_per_block}
        info.update(meta or {})
        return cls(
            tuple(t0 + c * k for k in range(1, max_tokens + 1)),
            tuple(draft_per_block * b for b in range(1, blocks + 1)),
            n,
            info,
            eagle_s=draft_per_block,
        )

    def to_dict(self) -> dict:
        return {
            "verify_s": list(self.verify_s),
            "draft_s": list(self.draft_s),
            "n": self.n,
            "lookup_s": self.lookup_s,
            "fit_s": self.fit_s,
            "eagle_s": self.eagle_s,
            "eagle_fit_s": self.eagle_fit_s,
            "tree_rows": list(self.tree_rows),
            "tree_verify_s": list(self.tree_verify_s),
            "context_len": self.context_len,
            "context_k": list(self.context_k),
            "context_slope_s": list(self.context_slope_s),
            "context_points": list(self.context_points),
            "context_extra_s": [list(row) for row in self.context_extra_s],
            "meta": dict(self.meta),
        }

    @classmethod
    def from_dict(cls, data: dict) -> "LatencyProfile":
        data = dict(data)
        if "n" not in data and "block_size" in data:  # profiles written before n was named n
            data["n"] = data.pop("block_size")
        missing = {"verify_s", "draft_s", "n"} - set(data)
        if missing:
            raise ValueError(f"latency profile lacks {', '.join(sorted(missing))}")
        return cls(
            tuple(data["verify_s"]),
            tuple(data["draft_s"]),
            data["n"],
            dict(data.get("meta", {})),
            float(data.get("lookup_s", 0.0)),
            float(data.get("fit_s", 0.0)),
            float(data.get("eagle_s", 0.0)),
            float(data.get("eagle_fit_s", 0.0)),
            tuple(data.get("tree_rows", ())),
            tuple(data.get("tree_verify_s", ())),
            int(data.get("context_len", 0)),
            tuple(data.get("context_k", ())),
            tuple(data.get("context_slope_s", ())),
            tuple(data.get("context_points", ())),
            tuple(tuple(row) for row in data.get("context_extra_s", ())),
        )

    def to_json(self, path: str) -> str:
        """Write atomically (temporary file, then rename)."""
        return atomic_write_text(path, json.dumps(self.to_dict(), indent=1))

    @classmethod
    def from_json(cls, path: str) -> "LatencyProfile":
        with open(path) as handle:
            return cls.from_dict(json.load(handle))


# ---- the price list: every modeled round of the engine, the oracle and replay comes from here ----


def drafting_s(profile: LatencyProfile, steps: tuple[str, ...] | list[str]) -> float:
    """Modeled seconds of a round's drafting steps, each priced by the drafter that ran it: a
    block-diffusion pass from `draft_time` (pass b of a round costs what the b-th pass costs), a
    look-up step `lookup_s`, a head step `eagle_s`. `steps` lists every step that ran, proposals made
    and not used included."""
    lookups = sum(1 for source in steps if source == LOOKUP)
    eagles = sum(1 for source in steps if source == EAGLE)
    if eagles:
        _check_eagle(profile)
    return profile.draft_time(len(steps) - lookups - eagles) + lookups * profile.lookup_s + eagles * profile.eagle_s


def _check_eagle(profile: LatencyProfile) -> None:
    if not profile.eagle_s > 0:
        raise ValueError(
            "this latency profile has no timing of the EAGLE-style head (eagle_s): it was measured for a pair "
            "without a head or before heads were timed; re-measure it (profiling.cached_profile(refresh=True))"
        )


def upkeep_s(profile: LatencyProfile, needs_features: bool, steps=()) -> float:
    """The drafter's context upkeep after a round: target features in, for drafters that read them
    (the EAGLE-style head's own, `eagle_fit_s`, when the round's `steps` are the head's)."""
    if not needs_features:
        return 0.0
    if EAGLE in steps:
        _check_eagle(profile)
        return profile.eagle_fit_s
    return profile.fit_s


def chain_round_s(profile: LatencyProfile, steps, d: int, needs_features: bool, context: int | None = None) -> float:
    """A chain round after `context` committed tokens: its drafting `steps`, one verification of
    [last token, d drafts], the upkeep."""
    verify = profile.verify_time(int(d) + 1, context)
    return drafting_s(profile, steps) + verify + upkeep_s(profile, needs_features, steps)


def tree_round_s(profile: LatencyProfile, steps, nodes: int, needs_features: bool, context: int | None = None) -> float:
    """A tree round after `context` committed tokens: its drafting `steps`, one tree verification
    of the root and `nodes` nodes, the upkeep."""
    verify = profile.tree_verify_time(int(nodes) + 1, context)
    return drafting_s(profile, steps) + verify + upkeep_s(profile, needs_features, steps)


def tree_row_prices(profile: LatencyProfile, nodes: int) -> list[float]:
    """dT_j for j = 0 .. nodes - 1: what node j adds to a tree verification that holds the root and
    j nodes before it (never negative: where verification does not grow, a node is free)."""
    rows = [profile.tree_verify_time(k) for k in range(1, int(nodes) + 2)]  # 1 .. nodes + 1 rows
    return [max(b - a, 0.0) for a, b in zip(rows, rows[1:])]


def chain_prices(profile: LatencyProfile, buffer, needs_features: bool, context: int | None = None):
    """d -> modeled seconds of this round verifying d drafts (d = 0: an AR step after the first
    drafting step, which every round drafts), drafting just the steps d needs: the oracle's prices."""

    def price(d: int) -> float:
        return chain_round_s(profile, buffer.steps_run(max(1, buffer.steps_for(d))), d, needs_features, context)

    return price


def tree_prices(profile: LatencyProfile, buffer, needs_features: bool, context: int | None = None):
    """(depth h, nodes) -> modeled seconds of this round verifying a tree of `nodes` nodes within
    depth h, drafting just the steps h needs ((0, 0): an AR step after the first drafting step)."""

    def price(h: int, nodes: int) -> float:
        return tree_round_s(profile, buffer.steps_run(max(1, buffer.steps_for(h))), nodes, needs_features, context)

    return price


def ar_text_s(profile: LatencyProfile, prompt_len: int, tokens: int) -> float:
    """Modeled seconds of AR decoding `tokens` tokens after a prompt of `prompt_len` tokens: one
    one-token forward per token, each after the context it sees."""
    if not profile.context_k:
        return tokens * profile.ar_token_time()
    return sum(profile.ar_token_time(prompt_len + g) for g in range(int(tokens)))
