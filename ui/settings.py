"""The race settings a visitor chooses, their caps, and the range checks with messages that name the limit.

No gradio here: a failed check raises `ValueError`, which the tabs show as a `gr.Error`.
Paper symbols: alpha (LibraSpec trade-off), n (block size), d_max (length cap).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

MAX_NEW_TOKENS_CAP = 512
D_MAX_CAP = 64
TEMPERATURE_MAX = 1.5
ALPHA_MAX = 20.0
SEED_MAX = 2**31 - 1


@dataclass(frozen=True)
class Settings:
    alpha: float = 2.2
    d_max: int = 24
    static_length: int | None = None  # None: n, the drafter's block size
    temperature: float = 0.0
    max_new_tokens: int = 128
    seed: int = 0


def _number(value, name: str, kind: str) -> float:
    """float(value), with a message naming the setting when it is not a number at all."""
    if isinstance(value, bool) or value is None:
        raise ValueError(f"{name} must be {kind}, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{name} must be {kind}, got {value!r}") from None


def integer_setting(value, name: str, low: int, high: int) -> int:
    number = _number(value, name, "an integer")
    if not math.isfinite(number) or number != int(number):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if not low <= number <= high:
        raise ValueError(f"{name} must be between {low} and {high}, got {int(number)}")
    return int(number)


def _real(value, name: str, low: float, high: float, low_open: bool = False) -> float:
    number = _number(value, name, "a number")
    if not math.isfinite(number):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if number > high or number < low or (low_open and number == low):
        side = f"> {low:g}" if low_open else f">= {low:g}"
        raise ValueError(f"{name} must be {side} and <= {high:g}, got {number:g}")
    return number


def check_settings(settings: Settings, n: int) -> Settings:
    """Range checks with messages naming the limit; `static_length=None` becomes n."""
    alpha = _real(settings.alpha, "alpha", 0.0, ALPHA_MAX, low_open=True)
    d_max = integer_setting(settings.d_max, "d_max", 1, D_MAX_CAP)
    if d_max < n:
        raise ValueError(f"d_max must be at least the block size n = {n} (Algorithm 1 starts at d = n), "
                         f"got {d_max}")
    static = n if settings.static_length in (None, 0) else settings.static_length
    return Settings(alpha=alpha, d_max=d_max, static_length=integer_setting(static, "static length", 1, D_MAX_CAP),
                    temperature=_real(settings.temperature, "temperature", 0.0, TEMPERATURE_MAX),
                    max_new_tokens=integer_setting(settings.max_new_tokens, "max new tokens", 1, MAX_NEW_TOKENS_CAP),
                    seed=integer_setting(settings.seed, "seed", 0, SEED_MAX))
