"""libraspec.spec: the one checked spec of a run's knobs (defaults, clamps keyed by field, caps)."""

from __future__ import annotations

import dataclasses

import pytest

from libraspec.spec import DEFAULT_ALPHA, LIBRARY_CAPS, Caps, RunSpec, SettingError

LAYER = "unit"  # tests/conftest.py


def test_defaults_are_one_set_and_a_valid_spec_is_left_alone():
    spec = RunSpec()
    assert spec.alpha == DEFAULT_ALPHA == 2.2 and spec.d_max == 24 and spec.max_new_tokens == 128
    checked, notes = spec.checked(7)
    assert notes == {} and checked == dataclasses.replace(spec, static_length=7, tree_depth=7, g4_initial=7)
    assert RunSpec(static_length=3, d_max=2).checked(1).spec.g4_initial == 2  # min(static length, d_max)
    assert RunSpec(g4_initial=9, d_max=8).checked(1).notes["g4_initial"].startswith("G4 initial length 9 -> 8")


def test_libraspec_start_is_unset_unless_given_and_at_most_d_max():
    """The paper starts LibraSpec at 10 drafts on Fast-dLLM (its block elsewhere). Unset or 0 stays
    None, so the policy starts at the n of the drafter that runs (an EAGLE-style head drafts 1 a step
    where the pair's block is 7); a start past d_max is lowered to it with a note."""
    assert RunSpec(libraspec_start=0).checked(7) == RunSpec().checked(7)
    assert RunSpec().checked(7).spec.libraspec_start is None
    assert RunSpec(libraspec_start=10, d_max=60).checked(15).spec.libraspec_start == 10
    checked, notes = RunSpec(libraspec_start=30, d_max=20).checked(7)
    assert checked.libraspec_start == 20 and notes == {"libraspec_start": "LibraSpec start 30 -> 20 (allowed 1..20)"}
    with pytest.raises(SettingError, match="LibraSpec start must be a number"):
        RunSpec(libraspec_start="ten").checked(7)


def test_out_of_range_values_are_clamped_with_a_note_keyed_by_field():
    spec = RunSpec(alpha=100.0, d_max=3, failfast_step=99, node_budget=0, temperature=9.0, seed=-1, max_new_tokens=2.6)
    checked, notes = spec.checked(7)
    assert (checked.alpha, checked.d_max, checked.failfast_step, checked.node_budget) == (64.0, 7, 7, 1)
    assert (checked.temperature, checked.seed, checked.max_new_tokens) == (4.0, 0, 3)
    assert notes["alpha"] == "alpha 100 -> 64 (allowed 0.05..64)"
    assert notes["d_max"] == "d_max 3 -> 7 (allowed 7..512)"
    assert notes["failfast_step"] == "FailFast start and step 99 -> 7 (allowed 1..7)"
    assert notes["node_budget"] == "node budget 0 -> 1 (allowed 1..512)"
    assert set(notes) == {"alpha", "d_max", "failfast_step", "node_budget", "temperature", "seed", "max_new_tokens"}
    assert spec.checked(7).note_list[0].startswith("alpha") and spec.checked(7).note_list[-1].startswith("seed")


def test_caps_and_the_context_window_bound_lengths_and_new_tokens():
    app = Caps(length=64, max_new_tokens=512, temperature=1.5)
    checked, notes = RunSpec(d_max=100, max_new_tokens=600).checked(7, caps=app)
    assert checked.d_max == 64 and checked.max_new_tokens == 512 and set(notes) == {"d_max", "max_new_tokens"}
    checked, notes = RunSpec(max_new_tokens=500).checked(7, context=512, prompt_tokens=400)
    assert checked.max_new_tokens == 512 - 400 - 24 - 1 and "context window" in notes["max_new_tokens"]
    assert RunSpec(d_max=600).checked(7, context=300).spec.d_max == 298  # what the target can verify
    with pytest.raises(ValueError, match="no room"):
        RunSpec().checked(7, context=512, prompt_tokens=500)
    assert LIBRARY_CAPS.length == 512


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("alpha", "fast", "alpha must be a number"),
        ("d_max", None, "d_max must be a number"),
        ("seed", float("nan"), "seed must be a finite number"),
        ("static_length", True, "static length must be a number"),
    ],
)
def test_what_is_not_a_number_is_refused_naming_the_field(field, value, message):
    with pytest.raises(SettingError, match=message) as refused:
        dataclasses.replace(RunSpec(), **{field: value}).checked(7)
    assert refused.value.field == field  # what a form shows the message beside


def test_a_trace_caps_the_lengths_once_with_one_note_a_field():
    """The what-if's `clamp_to_trace` is `RunSpec.checked` with the trace's look-ahead as the length
    cap: d_max 1000 becomes the look-ahead in one step with one note (not 512, then 48), and only
    the knobs the what-if reads are noted (the default node budget 32 > 24 is not)."""
    from types import SimpleNamespace

    from libraspec.analysis.whatif import clamp_to_trace

    trace = SimpleNamespace(n=7, max_positions=8192, lookahead=24)
    spec, notes = clamp_to_trace(RunSpec(d_max=1000, static_length=30, alpha=0.01), trace)
    assert (spec.d_max, spec.static_length, spec.alpha) == (24, 24, 0.05)
    assert notes == [
        "alpha 0.01 -> 0.05 (allowed 0.05..64)",
        "d_max 1000 -> 24 (allowed 7..24): the trace holds 24 drafts a position",
        "static length 30 -> 24 (allowed 1..24): the trace holds 24 drafts a position",
    ]
    assert clamp_to_trace(RunSpec(d_max=20), trace) == (RunSpec(d_max=20).checked(7).spec, [])
    capped, _ = clamp_to_trace(RunSpec(d_max=30, static_length=30), trace)
    assert (capped.d_max, capped.g4_initial) == (24, 24)  # G4's first length within the capped d_max
    one_block = SimpleNamespace(n=7, max_positions=8192, lookahead=7)
    assert clamp_to_trace(RunSpec(d_max=5), one_block)[1] == ["d_max 5 -> 7 (allowed 7..7)"]  # raised to n
    deep = SimpleNamespace(n=7, max_positions=8192, lookahead=64)  # alpha's cap is 64 too: not a length
    assert clamp_to_trace(RunSpec(alpha=100.0), deep)[1] == ["alpha 100 -> 64 (allowed 0.05..64)"]


def test_a_decode_config_is_derived_from_a_checked_spec_in_one_place():
    """Issue 44: `DecodeConfig.of` is the one place a run's config comes from (callers built it by
    hand 17 times, each choosing the oracle's look-ahead its own way): budget, temperature and seed
    from the spec; the look-ahead d_max, or fewer when a replayed trace recorded fewer drafts."""
    import re
    from pathlib import Path

    from libraspec.engine import DecodeConfig

    spec = RunSpec(d_max=12, max_new_tokens=40, temperature=0.7, seed=5).checked(4).spec
    config = DecodeConfig.of(spec)
    assert (config.max_new_tokens, config.temperature, config.seed, config.lookahead) == (40, 0.7, 5, 12)
    assert DecodeConfig.of(spec, recorded=8).lookahead == 8 and DecodeConfig.of(spec, recorded=30).lookahead == 12
    assert DecodeConfig.of(spec, seed=9, annotate_oracle=True) == dataclasses.replace(
        config, seed=9, annotate_oracle=True
    )
    defaults = DecodeConfig()
    assert (defaults.max_new_tokens, defaults.temperature, defaults.seed, defaults.lookahead) == (
        RunSpec.max_new_tokens,
        RunSpec.temperature,
        RunSpec.seed,
        RunSpec.d_max,
    )  # one set of defaults
    root = Path(__file__).resolve().parents[1]
    sources = [p for d in ("libraspec", "ui", "benchmarks", "scripts") for p in (root / d).rglob("*.py")]
    by_hand = [
        f"{p.relative_to(root)}:{text[: m.start()].count(chr(10)) + 1}"
        for p in sources + [root / "app.py"]
        for text in [p.read_text()]
        for m in re.finditer(r"\bDecodeConfig\(", text)
        if p.name != "engine.py"
    ]
    assert by_hand == [], f"built by hand, not by DecodeConfig.of: {by_hand}"
