"""The race settings a visitor chooses, their allowed ranges, and the app's caps.

No gradio here. The settings are a `libraspec.spec.RunSpec`, and `check_settings` is
`RunSpec.checked` under the app's caps (`APP_CAPS`: lengths up to D_MAX_CAP, max new tokens up to
MAX_NEW_TOKENS_CAP, temperature up to TEMPERATURE_MAX): a value out of range is clamped, never
refused, and every change comes back as a note keyed by its field, so the race tab states it next
to that field and the API returns it with the run. A value that is not a number at all (text,
None, NaN, infinity) raises ValueError. `check_race_modes` checks which modes (at most
RACE_COLUMNS) a race holds; `check_prompt_length` refuses a prompt longer than the device takes.
Paper symbols: alpha (LibraSpec trade-off), n (block size), d_max (length cap).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from libraspec.analysis.theory import auto_alpha
from libraspec.cost import LatencyProfile
from libraspec.modes import BASELINE, MODES, ORACLE, PAPER
from libraspec.records import RoundRecord
from libraspec.spec import ALPHA_RANGE, Caps, Checked, RunSpec, bounds

MAX_NEW_TOKENS_CAP = 512
# the longest prompt a race takes, by device: every mode prefills it and every step attends to it,
# so on a CPU a long prompt turns a race of seconds into many minutes (a 20,000-character prompt
# showed 70 s of "Starting..." and an estimate of 57 minutes); LIBRASPEC_MAX_PROMPT_TOKENS overrides
PROMPT_TOKENS_CAP = {"cpu": 2048, "cuda": 8192}
PROMPT_CAP_ENV = "LIBRASPEC_MAX_PROMPT_TOKENS"
D_MAX_CAP = 64  # the app's longest d_max, static length, tree depth and node budget
TEMPERATURE_MAX = 1.5
APP_CAPS = Caps(length=D_MAX_CAP, max_new_tokens=MAX_NEW_TOKENS_CAP, temperature=TEMPERATURE_MAX)
ALPHA_MIN, ALPHA_MAX = ALPHA_RANGE
FLAT_C_S = 1e-9  # a latency fit's cost per verified position at or below this is flat (rounding noise)
# the knobs a race shows, in the form's order (the other RunSpec fields keep their defaults there)
FIELDS = (  # the race form's knobs, in the form's order (new ones go last: the race API takes them by position)
    "alpha",
    "d_max",
    "static_length",
    "temperature",
    "max_new_tokens",
    "seed",
    "tree_depth",
    "node_budget",
    "libraspec_start",
)
UNSET_AT_ZERO = ("libraspec_start",)  # 0 (or empty) leaves the knob unset: LibraSpec starts at the drafter's n
RACEABLE = tuple(name for name, mode in MODES.items() if mode.kind != "ar")  # modes a race can hold
DEFAULT_RACE_MODES = (BASELINE, PAPER, ORACLE)
RACE_COLUMNS = 3  # modes one race holds at most: three columns stay readable at 1440 px


def prompt_cap(device_type: str) -> int:
    """The longest prompt, in tokens, a race takes on this device (`PROMPT_TOKENS_CAP`, or the env)."""
    value = os.environ.get(PROMPT_CAP_ENV, "").strip()
    if value:
        if not value.isdigit() or int(value) < 1:
            raise ValueError(f"{PROMPT_CAP_ENV} must be a positive integer, got {value!r}")
        return int(value)
    return PROMPT_TOKENS_CAP.get(device_type, PROMPT_TOKENS_CAP["cpu"])


def check_prompt_length(tokens: int, device_type: str) -> None:
    """Refuse, with the numbers and the remedy, a prompt longer than `prompt_cap` before anything runs."""
    cap = prompt_cap(device_type)
    if tokens > cap:
        raise ValueError(
            f"the prompt has {tokens:,} tokens; races here take prompts of up to {cap:,} tokens on the "
            f"{device_type.upper()} (every mode prefills the prompt and every step attends to it, so a longer "
            f"one would take many minutes): shorten it, or raise the cap with {PROMPT_CAP_ENV}"
        )


def allowed(name: str, n: int | None) -> tuple[float, float]:
    """The range `check_settings` keeps field `name` in (n None: not loaded yet, d_max from 1)."""
    return bounds(name, n or 1, APP_CAPS)


def check_settings(settings: RunSpec, n: int, context: int | None = None, prompt_tokens: int = 0) -> Checked:
    """`RunSpec.checked` under the app's caps: clamped values and a note per changed field.
    `context` (the target's context window) and `prompt_tokens` bound max new tokens so that
    prompt + output + the d_max look-ahead fit; `static_length` None or 0 means n (not a change)."""
    return settings.checked(n, context, prompt_tokens, APP_CAPS)


def check_race_modes(modes) -> tuple[str, ...]:
    """The modes a race holds, in the registry's order (the columns' order): `modes` is a list of names
    or one comma-separated string ("" or None: DEFAULT_RACE_MODES). Refuses an unknown mode, AR (the
    baseline every race measures anyway), none at all, and more than RACE_COLUMNS."""
    if modes is None or (isinstance(modes, str) and not modes.strip()):
        return DEFAULT_RACE_MODES
    names = [m.strip() for m in modes.split(",")] if isinstance(modes, str) else [str(m).strip() for m in modes]
    names = [m for m in names if m]
    unknown = [m for m in names if m not in RACEABLE]
    if unknown:
        raise ValueError(f"cannot race mode {unknown[0]!r}; choose from {', '.join(RACEABLE)}")
    if not names:
        raise ValueError("choose at least one mode to race")
    chosen = tuple(m for m in RACEABLE if m in names)
    if len(chosen) > RACE_COLUMNS:
        raise ValueError(f"a race holds at most {RACE_COLUMNS} modes, got {len(chosen)}: {', '.join(chosen)}")
    return chosen


@dataclass(frozen=True)
class Suggestion:
    """Section 3.4's alpha = T_verify(d) / (tau c) and what it was computed from."""

    alpha: float
    tau: float  # mean tokens committed per round
    d: int  # mean submitted length, rounded
    c_ms: float  # the latency fit's cost per verified position
    rounds: int


def suggest_alpha(records: list[RoundRecord], profile: LatencyProfile) -> Suggestion:
    """The alpha section 3.4 suggests for rounds like `records` (those with d >= 1) on `profile`.

    A profile whose cost does not grow with d (c <= 0: a tiny model, or a measurement whose load
    fell while it ran) makes alpha unbounded; the suggestion is then the range's top, ALPHA_MAX.
    Raises ValueError when no round submitted drafts.
    """
    drafted = [r for r in records if r.chosen_length > 0]
    if not drafted:
        raise ValueError("no round submitted drafts, so there is no mean tau to suggest alpha from")
    tau = sum(r.tau for r in drafted) / len(drafted)
    d = max(1, round(sum(r.chosen_length for r in drafted) / len(drafted)))
    _, c = profile.linear_fit()
    alpha = auto_alpha(profile, tau, d) if c > FLAT_C_S else ALPHA_MAX
    return Suggestion(alpha, tau, d, 1000 * c, len(drafted))
