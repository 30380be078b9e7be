"""The one checked spec of a run: every policy and decoding knob, one set of defaults, one clamp.

`RunSpec` holds the knobs of every length policy (LibraSpec's alpha, d_max and start, the static length,
G4's and FailFast's, the tree modes' depth and node budget) and of decoding (temperature, max new
tokens, seed). `RunSpec.checked(n, context, prompt_tokens, caps)` is the one place any of them is
validated: a value out of range is clamped, never refused, and every change comes back as a note
keyed by its field; a value that is not a number at all raises ValueError naming the field. The
app's settings, its race API, bench, sweep, report, replay and the step-through all read a
RunSpec and its defaults; the app passes tighter `Caps` (APP_CAPS) than the library's.

The default alpha is the paper's 2.2 (Table 4: robust across its models); how it fares on the
embedded pair's drafters, replayed on held-apart answers, is in benchmarks/results/lookup_alpha and
BENCHMARKS.md (figures live there, not here, so they never go stale in a docstring).
Paper symbols: alpha (trade-off), n (drafts per drafter step), d_max (cap on d).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import NamedTuple

ALPHA_RANGE = (0.05, 64.0)  # the paper's alpha = T / (tau c) reaches ~16 on CPU profiles
DEFAULT_ALPHA = 2.2  # see the module docstring
SEED_MAX = 2**31 - 1
# how notes and errors name each field
NAMES = {
    "alpha": "alpha",
    "d_max": "d_max",
    "libraspec_start": "LibraSpec start",
    "static_length": "static length",
    "g4_initial": "G4 initial length",
    "failfast_threshold": "FailFast threshold",
    "failfast_step": "FailFast start and step",  # FailFast's first length is its step
    "tree_depth": "tree depth",
    "node_budget": "node budget",
    "temperature": "temperature",
    "max_new_tokens": "max new tokens",
    "seed": "seed",
}
LENGTHS = (
    "d_max",
    "libraspec_start",
    "static_length",
    "g4_initial",
    "failfast_step",
    "tree_depth",
    "node_budget",
)  # `Caps.length`'s
N_DEFAULT = ("static_length", "tree_depth")  # None or 0 means n, the drafter's step (not a change)


@dataclass(frozen=True)
class Caps:
    """The largest values `RunSpec.checked` allows: the library's (`LIBRARY_CAPS`) or an app's."""

    length: int = 512  # d_max, static length, tree depth, node budget: never useful beyond on these models
    max_new_tokens: int = 1 << 20
    temperature: float = 4.0
    why: str = ""  # what bounds `length`, said in the note of a length lowered to it


LIBRARY_CAPS = Caps()


@dataclass(frozen=True)
class RunSpec:
    """Every knob of a run; `None` lengths default to the drafter's n."""

    alpha: float = DEFAULT_ALPHA  # LibraSpec's trade-off (module docstring)
    d_max: int = 24  # cap on d (the paper's for DFlash); also the oracle's look-ahead
    libraspec_start: int | None = None  # LibraSpec's first d (Algorithm 1 line 4), at most d_max; None or 0 = n
    static_length: int | None = None  # static d; None or 0 = n
    g4_initial: int | None = None  # G4's first d; None = min(static length, d_max) (set by `checked`)
    failfast_threshold: float = 0.6  # FailFast extends while every q_i >= this
    failfast_step: int = 4  # FailFast's extension step
    tree_depth: int | None = None  # ddtree's depth; None or 0 = n (one block-diffusion pass)
    node_budget: int = 32  # tree modes' nodes verified besides the root (paper: 64..512 on GPUs)
    temperature: float = 0.0  # 0 = greedy
    max_new_tokens: int = 128
    seed: int = 0

    def checked(
        self, n: int, context: int | None = None, prompt_tokens: int = 0, caps: Caps = LIBRARY_CAPS
    ) -> "Checked":
        """The spec clamped to what a drafter with n drafts per step can run, and a note per field
        that changed. `context` (the target's context window) bounds the lengths to what it can
        verify (context - 2) and, with `prompt_tokens`, max new tokens so that prompt + output + the d_max
        look-ahead fit. Raises ValueError for a value that is not a finite number, and when the
        prompt leaves no room at all."""
        notes: dict[str, str] = {}

        def clamp(name: str, integer: bool = True, value=None, d_max=None):
            low, high = bounds(name, n, caps, context, d_max)
            value = getattr(self, name) if value is None else value
            number = as_number(value, NAMES[name], field=name)
            fixed = min(max(round(number) if integer else number, low), high)
            if fixed != number:
                notes[name] = (
                    f"{NAMES[name]} {_shown(number)} -> {_shown(fixed)} (allowed {_shown(low)}..{_shown(high)})"
                )
                if caps.why and name in LENGTHS and fixed == caps.length < number:
                    notes[name] += f": {caps.why}"
            return int(fixed) if integer else float(fixed)

        def or_n(name: str):
            value = getattr(self, name)
            return n if value is None or (not isinstance(value, bool) and value == 0) else value

        d_max = clamp("d_max")
        static_length = clamp("static_length", value=or_n("static_length"))
        fixed = dict(
            alpha=clamp("alpha", integer=False),
            d_max=d_max,
            # unset stays None: the policy starts at the n of the drafter that runs (a head's 1, a
            # block's n), which the n given here need not be
            libraspec_start=None
            if self.libraspec_start is None
            or (not isinstance(self.libraspec_start, bool) and self.libraspec_start == 0)
            else clamp("libraspec_start", d_max=d_max),
            static_length=static_length,
            g4_initial=min(static_length, d_max) if self.g4_initial is None else clamp("g4_initial", d_max=d_max),
            failfast_threshold=clamp("failfast_threshold", integer=False),
            failfast_step=clamp("failfast_step", d_max=d_max),
            tree_depth=clamp("tree_depth", value=or_n("tree_depth")),
            node_budget=clamp("node_budget"),
            temperature=clamp("temperature", integer=False),
            max_new_tokens=clamp("max_new_tokens"),
            seed=clamp("seed"),
        )
        if context is not None:
            room = context - prompt_tokens - d_max - 1
            if room < 1:
                raise ValueError(
                    f"the prompt is {prompt_tokens} tokens long; with d_max = {d_max} it leaves "
                    f"no room in the {context}-token context window"
                )
            if fixed["max_new_tokens"] > room:
                asked = as_number(self.max_new_tokens, NAMES["max_new_tokens"])
                notes["max_new_tokens"] = (
                    f"max new tokens {_shown(asked)} -> {room} (prompt + output + d_max look-ahead must fit the "
                    f"{context}-token context window)"
                )
                fixed["max_new_tokens"] = room
        return Checked(RunSpec(**fixed), notes)


def bounds(
    name: str, n: int, caps: Caps = LIBRARY_CAPS, context: int | None = None, d_max: int | None = None
) -> tuple[float, float]:
    """The range `RunSpec.checked` keeps field `name` in, for a drafter with n drafts per step
    (G4's first length and FailFast's step stay within the checked `d_max`)."""
    # with a window: d drafts and one token after them must fit beside at least the anchor token
    high = caps.length if context is None else max(1, min(caps.length, context - 2))
    return {
        "alpha": ALPHA_RANGE,
        "d_max": (min(n, high), high),
        "libraspec_start": (1, d_max or high),
        "static_length": (1, high),
        "g4_initial": (1, d_max or high),
        "failfast_threshold": (0.0, 1.0),
        "failfast_step": (1, d_max or high),
        "tree_depth": (1, high),
        "node_budget": (1, high),
        "temperature": (0.0, caps.temperature),
        "max_new_tokens": (1, caps.max_new_tokens),
        "seed": (0, SEED_MAX),
    }[name]


class Checked(NamedTuple):
    """A checked spec and what the check changed: field name -> note (unpacks as spec, notes)."""

    spec: RunSpec
    notes: dict[str, str]

    @property
    def note_list(self) -> list[str]:
        """The notes in the fields' order."""
        return [self.notes[f.name] for f in dataclasses.fields(RunSpec) if f.name in self.notes]


class SettingError(ValueError):
    """A value that is not a finite number; `field` is the RunSpec field it was given for (None
    for an input that is not one), so a form can show the message beside that field."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


def _shown(number: float) -> str:
    """A setting as a note writes it: whole numbers in full (the seed's 2147483647, never
    2.14748e+09), others in their shortest form."""
    return str(int(number)) if float(number).is_integer() and abs(number) < 1e18 else f"{number:g}"


def as_number(value, name: str, field: str | None = None) -> float:
    """float(value), refusing what is not a finite number with a `SettingError` naming the input
    (`name`, as the message says it; `field`, the RunSpec field, when it is one)."""
    if value is None:  # a form's number field that is empty, or held text that is not a number
        raise SettingError(f"{name} must be a number; the field is empty (or held text that is not a number)", field)
    if isinstance(value, bool):
        raise SettingError(f"{name} must be a number, got {value!r}", field)
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise SettingError(f"{name} must be a number, got {value!r}", field) from None
    if not math.isfinite(number):
        raise SettingError(f"{name} must be a finite number, got {value!r}", field)
    return number
