"""The app's view helpers without a server: text tinted by token origin, escaping, the settings
check and its notes, the suggested alpha, finish ranks within noise, the time left."""

from __future__ import annotations

import dataclasses
import html
import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from libraspec.analysis.theory import auto_alpha
from libraspec.cost import LatencyProfile
from libraspec.models.registry import ByteTokenizer
from libraspec.records import RoundRecord, summarize
from libraspec.spec import RunSpec
from ui.race_words import alpha_advice, run_report, verdict
from ui.render import TextSegments, column_html, eta_text, legend_html, status_html
from ui.run import Run
from ui.settings import (
    ALPHA_MAX,
    ALPHA_MIN,
    D_MAX_CAP,
    MAX_NEW_TOKENS_CAP,
    RACE_COLUMNS,
    RACEABLE,
    check_race_modes,
    check_settings,
    suggest_alpha,
)

LAYER = "app"  # tests/conftest.py

TOKENIZER = ByteTokenizer()


def _record(k: int, committed: list[int], bonus: bool = True, sources: tuple[str, ...] = ()) -> RoundRecord:
    """Round k committing `committed` (its last token the target's bonus unless `bonus` is False)."""
    return RoundRecord(
        mode="libraspec",
        round_index=k,
        start_position=0,
        draft_tokens=(),
        confidences=(),
        blocks_drafted=1,
        policy_steps=(),
        eps_bounds=(),
        chosen_length=len(committed) - bonus,
        accepted=len(committed) - bonus,
        committed_tokens=tuple(committed),
        bonus_token=committed[-1] if bonus else None,
        oracle_length=None,
        draft_s=0.01,
        policy_s=0.0,
        verify_s=0.02,
        modeled_s=0.03,
        cumulative_tokens=0,
        cumulative_s=0.03 * (k + 1),
        cumulative_modeled_s=0.03 * (k + 1),
        draft_sources=sources,
    )


@settings(max_examples=60, deadline=None)
@given(text=st.text(min_size=1, max_size=30), cuts=st.lists(st.integers(1, 6), min_size=1, max_size=40))
def test_segments_always_concatenate_to_the_decoded_text(text, cuts):
    ids = TOKENIZER.encode(text)  # multi-byte characters may be split across rounds
    segments, start, k = TextSegments(TOKENIZER.decode), 0, 0
    for size in cuts * (len(ids) // len(cuts) + 1):
        if start >= len(ids):
            break
        segments.add(_record(k, ids[start : start + size], bonus=k % 3 != 2))
        start, k = start + size, k + 1
        assert "".join(p[0] for p in segments.pieces) == TOKENIZER.decode(ids[:start]) == segments.text
    assert segments.text == text


def _spans(out: str) -> list[tuple[str, str, str]]:
    """(origin, style, text) of every token span of a column's HTML."""
    return [
        (origin, style, html.unescape(text))
        for origin, style, text in re.findall(
            r'<span class="ls-tok" data-origin="(\w+)"[^>]*style="([^"]*)">([^<]*)</span>', out
        )
    ]


def test_tokens_are_tinted_by_origin_without_splitting_words():
    """A number whose tokens come from look-up, diffusion and the target reads as one word: unpadded
    spans, a tint per drafter, the target's token plain (the old view boxed every round with margin,
    padding and a border, which split "90%" into "9 0 %", and made every bonus token bold magenta)."""
    segments = TextSegments(TOKENIZER.decode)
    segments.add(_record(0, TOKENIZER.encode("It is 90%"), sources=("dflash",) * 6 + ("lookup",) * 2))
    segments.add(_record(1, TOKENIZER.encode(".")))  # an AR step: the target's token only
    spans = _spans(segments.html())
    assert [(origin, text) for origin, _, text in spans] == [
        ("dflash", "It is "),
        ("lookup", "90"),
        ("bonus", "%"),
        ("bonus", "."),
    ]
    styles = {origin: style for origin, style, _ in spans}
    for style in styles.values():
        assert not re.search(r"margin|padding|border|font-weight", style)
    assert styles["bonus"] == "" and styles["dflash"] != styles["lookup"] and "underline" in styles["lookup"]
    assert re.sub(r"<[^>]+>", "", segments.html()) == html.escape("It is 90%.", quote=False)


def test_newlines_are_text_between_spans():
    """No span holds a newline (a tinted newline showed as an empty sliver), yet every newline is kept."""
    segments = TextSegments(TOKENIZER.decode)
    segments.add(_record(0, TOKENIZER.encode("def f():\n\n    return 1"), sources=("dflash",) * 23))
    out = segments.html()
    assert all("\n" not in text for _, _, text in _spans(out))
    assert re.sub(r"<[^>]+>", "", out) == "def f():\n\n    return 1"


def test_model_text_and_prompt_are_escaped():
    evil = "<script>alert(1)</script> & <b>"
    segments = TextSegments(TOKENIZER.decode)
    segments.add(_record(0, TOKENIZER.encode(evil)))
    out = column_html("static", segments, summarize([_record(0, [5, 6])]), rank=1)
    assert "<script>" not in out and html.escape(evil[:-1], quote=False) in out
    status = status_html("Racing", prompt=evil, notes=[evil], progress=evil)
    assert "<script>" not in status and status.count(html.escape("<script>")) == 3  # progress, prompt, notes


def test_a_column_shows_the_spread_of_its_round_times():
    rounds = [dataclasses.replace(_record(k, [5, 6]), verify_s=v) for k, v in enumerate([0.02, 0.03, 0.04, 0.05, 0.3])]
    summary = summarize(rounds)  # measured per round: 0.01 drafting + verify = 30, 40, 50, 60, 310 ms
    assert summary.round_s == pytest.approx((0.04, 0.05, 0.06))
    assert "a round takes 50 ms (middle half 40–60 ms)" in column_html("libraspec", None, summary, None)


def test_column_without_rounds_shows_placeholder():
    out = column_html("oracle", None, None, None, waiting="press <Run>")
    assert "press &lt;Run&gt;" in out and "rounds –" in out


def test_settings_defaults_and_integral_floats():
    checked = check_settings(RunSpec(d_max=24.0, max_new_tokens=64.0, seed=3.0), n=15)
    assert checked.notes == {} and checked.spec.static_length == 15
    assert checked.spec.tree_depth == 15 and checked.spec.node_budget == 32  # the tree modes' defaults
    assert checked.spec.d_max == 24 and isinstance(checked.spec.d_max, int)
    assert check_settings(RunSpec(static_length=0), n=7).spec.static_length == 7


@pytest.mark.parametrize(
    "field, value, fixed, note",
    [
        ("alpha", 0.0, ALPHA_MIN, "alpha 0 -> 0.05 (allowed 0.05..64)"),
        ("alpha", 100.0, ALPHA_MAX, "alpha 100 -> 64"),
        ("d_max", 3, 15, "d_max 3 -> 15 (allowed 15..64)"),
        ("d_max", 24.5, 24, "d_max 24.5 -> 24"),
        ("d_max", 10**9, D_MAX_CAP, f"d_max 1000000000 -> {D_MAX_CAP}"),
        ("static_length", -2, 1, "static length -2 -> 1"),
        ("temperature", 2.0, 1.5, "temperature 2 -> 1.5"),
        ("temperature", -0.1, 0.0, "temperature -0.1 -> 0"),
        ("max_new_tokens", 100_000, MAX_NEW_TOKENS_CAP, "max new tokens 100000 -> 512 (allowed 1..512)"),
        ("max_new_tokens", 0, 1, "max new tokens 0 -> 1"),
        ("seed", -1, 0, "seed -1 -> 0"),
        ("tree_depth", 100, D_MAX_CAP, f"tree depth 100 -> {D_MAX_CAP}"),
        ("node_budget", 0, 1, "node budget 0 -> 1"),
        ("node_budget", 1000, D_MAX_CAP, f"node budget 1000 -> {D_MAX_CAP} (allowed 1..{D_MAX_CAP})"),
    ],
)
def test_out_of_range_settings_are_clamped_and_the_clamp_is_noted_by_field(field, value, fixed, note):
    """Every correction is stated for its field (max new tokens 100000 once became 512 silently, alpha 0 became 0.2)."""
    checked = check_settings(dataclasses.replace(RunSpec(), **{field: value}), n=15)
    assert getattr(checked.spec, field) == fixed
    assert list(checked.notes) == [field] and checked.notes[field].startswith(note)


def test_max_new_tokens_is_clamped_to_the_room_the_prompt_leaves():
    checked = check_settings(RunSpec(max_new_tokens=500), n=7, context=512, prompt_tokens=400)
    assert checked.spec.max_new_tokens == 512 - 400 - 24 - 1
    assert "context window" in checked.notes["max_new_tokens"]
    with pytest.raises(ValueError, match="no room"):
        check_settings(RunSpec(), n=7, context=512, prompt_tokens=500)


@pytest.mark.parametrize(
    "bad, message",
    [
        (dict(alpha=math.nan), "alpha must be a finite"),
        (dict(alpha=math.inf), "alpha must be a finite"),
        (dict(alpha="abc"), "alpha must be a number, got 'abc'"),
        (dict(d_max=None), "d_max must be a number"),
        (dict(temperature=math.nan), "temperature must be a finite"),
        (dict(max_new_tokens=None), "max new tokens must be a number"),
        (dict(seed=True), "seed must be a number"),
    ],
)
def test_settings_that_are_not_numbers_are_refused(bad, message):
    with pytest.raises(ValueError, match=message):
        check_settings(RunSpec(**bad), n=15)


def test_a_field_that_is_not_a_number_says_so_under_itself_only():
    """Leaving a settings field: its own refusal shows under it; another field that is not a number
    (yet) does not hide this field's own check (issue 45: alpha "abc" hid every other field's)."""
    from types import SimpleNamespace

    import gradio as gr

    from ui.race_tab import RaceTabs
    from ui.settings import FIELDS

    tab = RaceTabs.__new__(RaceTabs)
    tab.session = SimpleNamespace(n=7)
    values = dict(zip(FIELDS, (2.2, 24, 0, 0.0, 64, 0, 0, 32)))
    values["d_max"] = "many"
    assert "d_max must be a number, got 'many'" in tab.check_field("d_max", *values.values()).info
    assert tab.check_field("alpha", *values.values()) != gr.skip()
    values["alpha"] = 1000.0  # its own clamp shows while d_max is still not a number
    update = tab.check_field("alpha", *values.values())
    assert "alpha 1000 ->" in update.info and "d_max" not in update.info
    values["d_max"], values["alpha"] = 99999, None  # a browser sends an empty or non-numeric field as None
    assert "d_max 99999 -> 64" in tab.check_field("d_max", *values.values()).info
    info = tab.check_field("alpha", *values.values()).info
    assert "alpha must be a number; the field is empty" in info and "None" not in info


def test_a_fields_check_sets_the_value_only_when_it_corrected_it():
    """A check answers after the visitor left the field; on a loaded server the visitor may have typed
    a new value by then (a browser run typed alpha 24, then 2.2, and the late check of 24 put 24 back).
    So a value the check left unchanged is not sent back; a corrected one is."""
    from types import SimpleNamespace

    from ui.race_tab import RaceTabs
    from ui.settings import FIELDS

    tab = RaceTabs.__new__(RaceTabs)
    tab.session = SimpleNamespace(n=7)
    values = dict(zip(FIELDS, (24.0, 24, 0, 0.0, 64, 0, 0, 32)))
    update = tab.check_field("alpha", *values.values())
    assert update.value is None and "allowed 0.05..64" in update.info
    values["alpha"] = 100.0
    update = tab.check_field("alpha", *values.values())
    assert update.value == 64.0 and "alpha 100 -> 64" in update.info


def test_a_clamped_seed_is_written_in_full():
    """Whole numbers in notes are written in full: the seed's range reads 0..2147483647 in the note
    as in the field's hint, never 2.14748e+09 (issue 45)."""
    from ui.race_tab import field_info

    checked = check_settings(RunSpec(seed=2**40), n=7)
    assert checked.notes["seed"] == f"seed {2**40} -> 2147483647 (allowed 0..2147483647)"
    assert "2147483647" in field_info("seed", 7) and "e+" not in field_info("seed", 7)


def test_the_alpha_the_app_suggests_is_within_the_allowed_range():
    """Section 3.4's alpha reaches ~16-24 on CPU profiles; the range must keep it, not clamp it."""
    assert ALPHA_MAX >= 24 and check_settings(RunSpec(alpha=24.0), n=7).notes == {}
    profile = LatencyProfile.from_linear(0.05, 0.001, 0.005, 7, 25)
    rounds = [_record(k, [5, 6, 7], sources=("dflash",) * 2) for k in range(4)] + [_record(4, [5])]  # + an AR step
    suggestion = suggest_alpha(rounds, profile)
    assert (suggestion.rounds, suggestion.tau, suggestion.d) == (4, 3.0, 2)  # rounds that submitted drafts
    assert suggestion.alpha == pytest.approx(auto_alpha(profile, suggestion.tau, suggestion.d))
    assert ALPHA_MIN < suggestion.alpha < ALPHA_MAX
    with pytest.raises(ValueError, match="no round submitted drafts"):
        suggest_alpha([], profile)


def test_a_flat_latency_profile_suggests_the_top_of_the_alpha_range():
    """c = 0 (a tiny model, or a measurement whose load fell while it ran) makes section 3.4's alpha
    unbounded: the app suggests ALPHA_MAX and says why, instead of no suggestion at all."""
    flat = LatencyProfile.from_linear(0.05, 0.0, 0.005, 7, 25)
    rounds = [_record(k, [5, 6, 7], sources=("dflash",) * 2) for k in range(4)]
    suggestion = suggest_alpha(rounds, flat)
    assert suggestion.alpha == ALPHA_MAX and abs(suggestion.c_ms) < 1e-9
    assert "top of the allowed range" in alpha_advice(suggestion) and "no finite value" in alpha_advice(suggestion)


def _timed(mode: str, seconds: list[float], modeled: float = 0.05) -> list[RoundRecord]:
    """Records of a mode whose rounds took `seconds` (measured) against `modeled` each."""
    total, records = 0.0, []
    for k, s in enumerate(seconds):
        total += s
        records.append(
            dataclasses.replace(
                _record(k, [5, 6]),
                mode=mode,
                draft_s=0.0,
                verify_s=s,
                modeled_s=modeled,
                cumulative_s=total,
                finished=k == len(seconds) - 1,
            )
        )
    return records


def _race(records: dict[str, list[RoundRecord]], order: list[str]) -> Run:
    run = Run("r1", "p", RunSpec(), [], [], "tiny-llama", 7, "local", records=records)
    run.finish_order = order
    return run


def test_ranks_follow_measured_seconds_not_the_order_of_finishing():
    run = _race(
        {
            "static": _timed("static", [0.30] * 10),
            "libraspec": _timed("libraspec", [0.20] * 10),
            "oracle": _timed("oracle", [0.25] * 10),
        },
        order=["static", "oracle", "libraspec"],
    )
    assert [run.rank(m) for m in ("libraspec", "oracle", "static")] == [1, 2, 3]
    assert run.tied_with("libraspec") == []  # no noise at all: every gap is real
    assert verdict(run).startswith("LibraSpec was fastest")


def test_a_gap_within_the_noise_of_per_round_times_is_no_win():
    noisy = [0.05, 0.15] * 10  # per-round residuals with a spread of ~0.05 s: totals are ~±0.2 s
    run = _race(
        {
            "static": _timed("static", noisy),
            "libraspec": _timed("libraspec", noisy[1:] + [0.04]),
            "oracle": _timed("oracle", [0.5] * 20),
        },
        order=["static", "libraspec", "oracle"],
    )
    assert run.seconds("libraspec") < run.seconds("static")  # 0.01 s apart: noise
    assert run.rank("libraspec") == run.rank("static") == 1 and run.tied_with("libraspec") == [
        "static"
    ]  # a shared place
    assert run.tied_with("oracle") == []  # 8 s slower: a real gap
    assert verdict(run).startswith("No clear winner: LibraSpec, Static")
    badge = column_html("libraspec", None, run.summary("libraspec"), 1, tied_with=run.tied_with("libraspec"))
    assert "finished 1st · within noise of Static" in badge
    report = run_report(run)
    assert report["modes"]["static"]["within_noise_of"] == ["libraspec"] and report["verdict"].startswith("No clear")


def test_no_winner_when_a_slower_mode_with_a_wide_noise_reaches_the_fastest():
    """ "Within noise" is not transitive: the runner-up is clearly behind, a third mode with a wide
    noise is not. The verdict names no winner, in agreement with the fastest's `tied_with`."""
    noisy = [0.05, 0.15] * 10  # ~±0.2 s on the total
    run = _race(
        {
            "oracle": _timed("oracle", [0.1] * 20),  # 2.0 s, no noise
            "static": _timed("static", [0.105] * 20),  # 2.1 s, no noise: 0.1 s behind, a real gap
            "libraspec": _timed("libraspec", noisy[1:] + [0.2]),  # 2.15 s, within its noise of 2.0
        },
        order=["oracle", "static", "libraspec"],
    )
    # no place inside the noise: LibraSpec is within noise of both, so nobody is ahead of it beyond noise
    assert [run.rank(m) for m in ("oracle", "static", "libraspec")] == [1, 2, 1]
    assert not run.within_noise("oracle", "static") and run.tied_with("oracle") == ["libraspec"]
    assert verdict(run).startswith("No clear winner: Oracle, LibraSpec")


def test_progress_shows_the_time_left():
    assert eta_text(0, 10, 5.0) == "estimating the time left"
    assert eta_text(5, 10, 6.0) == "about 6.0 s left"
    assert eta_text(1, 4, 40.0) == "about 2 min 00 s left"


def test_the_raced_modes_are_checked():
    """The race holds up to RACE_COLUMNS of the registry's policy, oracle and tree modes, in the registry's order."""
    assert check_race_modes(None) == check_race_modes("") == ("static", "libraspec", "oracle")
    assert {"ddtree", "ddtree-libraspec", "g4", "failfast"} <= set(RACEABLE) and "ar" not in RACEABLE
    assert check_race_modes(["ddtree-libraspec", "static"]) == ("static", "ddtree-libraspec")
    assert check_race_modes(" ddtree , libraspec,ddtree") == ("libraspec", "ddtree")  # the API's string
    for bad, message in (
        (["ar"], "cannot race mode 'ar'"),
        (["magic"], "cannot race mode 'magic'"),
        ([], "at least one mode"),
        (list(RACEABLE[: RACE_COLUMNS + 1]), "at most 3 modes"),
    ):
        with pytest.raises(ValueError, match=message):
            check_race_modes(bad)


def test_a_tree_round_is_described_as_a_tree():
    from ui.race_words import round_info

    record = dataclasses.replace(
        _record(0, [5, 6, 7]),
        mode="ddtree-libraspec",
        confidences=(0.9, 0.8, 0.1),
        draft_sources=("dflash",) * 3,
        chosen_length=3,
        accepted=2,
        tree_size=9,
        tree_tokens=tuple(range(9)),
        tree_parents=(-1,) * 9,
        tree_probs=(0.1,) * 9,
        oracle_length=2,
        oracle_tree_size=4,
    )
    run = Run(
        "r1",
        "p",
        RunSpec(node_budget=9),
        [],
        [],
        "tiny-llama",
        7,
        "local",
        modes=("ddtree-libraspec",),
        records={"ddtree-libraspec": [record]},
    )
    text = round_info(run, "ddtree-libraspec", 0)
    assert "The tree holds 9 nodes (node budget 9) up to depth d = 3; the target accepted a path of 2" in text
    assert "in hindsight depth 2 with 4 nodes was best" in text and "Submitted" not in text


def test_the_race_legend_defines_measured_and_modeled():
    """Issue 34 (5): the race tab names both kinds of figure where its columns show them."""
    text = re.sub(r"<[^>]+>", "", legend_html())
    assert "measured: wall-clock seconds on this machine" in text and "timing noise" in text
    assert "modeled: the same rounds priced by the latency profile" in text


def test_your_tries_say_d_max_never_bound_once_per_d_max():
    """Six tries at d_max 24 that never bound d make one note, not six (issue 45); another d_max its own."""
    import pandas as pd

    from ui.history import history_notes

    rows = [
        {"try": t, "mode": "LibraSpec", "prompt": f"p{t}", "drafter": "dflash", "decisions": f"x{t}", "d_max": 24}
        for t in range(1, 7)
    ]
    rows.append({"try": 7, "mode": "G4", "prompt": "p7", "drafter": "dflash", "decisions": "x7", "d_max": 40})
    frame = pd.DataFrame(rows).assign(**{"d_max bound (share of rounds)": 0.0})
    notes = history_notes(frame)
    assert notes == [
        "d_max = 24 never bound d in tries 1 (LibraSpec), 2 (LibraSpec), 3 (LibraSpec), 4 (LibraSpec), "
        "5 (LibraSpec), 6 (LibraSpec), so a larger d_max would have decided the same.",
        "d_max = 40 never bound d in try 7 (G4), so a larger d_max would have decided the same.",
    ]


def test_a_race_of_one_round_names_no_winner():
    """A 1-token race (one round a mode) has no measured timing noise: no winner, no real gap
    (issue 45: "Oracle was fastest: 0.05 s vs 0.05 s ... beyond the timing noise of ±0.00 s")."""
    run = _race(
        {
            "static": _timed("static", [0.052]),
            "oracle": _timed("oracle", [0.049]),
            "libraspec": _timed("libraspec", [0.2, 0.2]),
        },
        order=["oracle", "static", "libraspec"],
    )
    assert run.tied_with("oracle") == ["static", "libraspec"] and run.within_noise("oracle", "static")
    text = verdict(run)
    assert text.startswith("No clear winner: Oracle, Static, LibraSpec") and "single round" in text
    assert "beyond the timing noise" not in text and run_report(run)["modes"]["oracle"]["within_noise_of"]


def test_a_status_note_is_shown_whole_not_cut_to_one_line():
    """Issue 45: the warning that explained the ranks was cut with "…" (the whole text only on hover)."""
    note = "measured ranks follow wall-clock time, which carries timing noise; " * 4
    html_text = status_html("Done.", notes=[note])
    assert html.escape(note.strip()) in html_text and "text-overflow" not in html_text and "nowrap" not in html_text


def test_a_race_that_waits_its_turn_says_so_and_clears_a_previous_refusal():
    """Issue 45: a queued race showed its tab's previous refusal until it started."""
    from ui.race_tab import RaceTabs

    button, accordion, status = RaceTabs.lock()
    assert "Queued" in status and "ls-error" not in status and not button.interactive


def test_the_inspector_offers_the_rounds_worth_showing():
    """Issue 45: finding multi-step rounds meant scanning 59 one-iteration rollbacks. The inspector's
    list names the round of most iterations, an extend, an extend then a roll-back and the largest
    |d - d*|, each once; no list for rounds that drafted nothing."""
    from libraspec.records import PolicyStep, interesting_rounds

    extend = PolicyStep(7, 9, 9, 5, 1, False)
    back = PolicyStep(9, 8, 8, 5, 0, True)
    stop = PolicyStep(7, 5, 5, 0, 0, True)

    def rounds(k, steps, d, d_star):
        return dataclasses.replace(_record(k, [5] * (d + 1)), policy_steps=steps, oracle_length=d_star)

    records = [
        rounds(0, (stop,), 5, 5),
        rounds(1, (extend, back), 8, 8),
        rounds(2, (stop,), 5, 1),
        rounds(3, (extend, extend, extend, back), 8, 8),
        rounds(4, (), 0, 0),
    ]
    assert interesting_rounds(records) == [
        ("most iterations (4): round 3", 3),
        ("an extend: round 1", 1),
        ("largest |d - d*| (d = 5, d* = 1): round 2", 2),
    ]  # round 1 is the first extend and the first extend-then-roll-back: named once
    assert interesting_rounds([rounds(0, (stop,), 5, 5)]) == [] and interesting_rounds([]) == []


def test_the_race_form_is_named_once_and_sizes_its_gpu_call():
    """Issue 44: the form's values reach the session as one named `RaceForm` (no positional
    14-argument handlers); the live race's inputs are `FORM`'s, in its order, and a Space's GPU
    reservation reads max_new_tokens from the form by name."""
    from types import SimpleNamespace

    import gradio as gr

    from ui.hosting import race_seconds
    from ui.race_tab import FORM, RaceForm, RaceTabs, _race_gpu_seconds

    form = RaceForm.of({"prompt": "Hi", "alpha": 3.5, "max_new_tokens": 512, "modes": ["static"], "drafter": "lookup"})
    assert (form.prompt, form.settings.alpha, form.settings.max_new_tokens) == ("Hi", 3.5, 512)
    assert (form.modes, form.drafter, form.model, form.inspect_mode) == (["static"], "lookup", None, None)
    assert form.settings.d_max == RunSpec.d_max  # a value the form lacks is the spec's default
    assert _race_gpu_seconds("owner", form) == race_seconds(512) > race_seconds(8)
    tab = RaceTabs(SimpleNamespace(n=7, loaded=False, offered=["one"], model="one", default_drafter=None))
    with gr.Blocks():
        tab.build_status()
        with gr.Tabs():
            tab.build()
    named = tab._form_components()
    assert tuple(named) == tuple(name for name in FORM if name != "model")  # one pair: no model field
    assert named["alpha"] is tab.fields["alpha"] and named["inspect_mode"] is tab.inspector.mode
