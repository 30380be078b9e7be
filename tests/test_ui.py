"""The app's view helpers without a server: round-grouped text, escaping, setting checks."""
from __future__ import annotations

import html
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from libraspec.models.registry import ByteTokenizer
from libraspec.records import RoundRecord, summarize
from ui.render import TextSegments, column_html, status_html
from ui.session import D_MAX_CAP, Settings, check_settings

TOKENIZER = ByteTokenizer()


def _record(k: int, committed: list[int], bonus: bool = True) -> RoundRecord:
    return RoundRecord(
        mode="libraspec", round_index=k, start_position=0, draft_tokens=(), confidences=(), blocks_drafted=1,
        policy_steps=(), eps_bounds=(), chosen_length=len(committed), accepted=len(committed) - bonus,
        committed_tokens=tuple(committed), bonus_token=committed[-1] if bonus else None, oracle_length=None,
        draft_s=0.01, policy_s=0.0, verify_s=0.02, modeled_s=0.03, cumulative_tokens=0, cumulative_s=0.03 * (k + 1),
        cumulative_modeled_s=0.03 * (k + 1))


@settings(max_examples=60, deadline=None)
@given(text=st.text(min_size=1, max_size=30), cuts=st.lists(st.integers(1, 6), min_size=1, max_size=40))
def test_segments_always_concatenate_to_the_decoded_text(text, cuts):
    ids = TOKENIZER.encode(text)  # multi-byte characters may be split across rounds
    segments, start, k = TextSegments(TOKENIZER.decode), 0, 0
    for size in cuts * (len(ids) // len(cuts) + 1):
        if start >= len(ids):
            break
        segments.add(_record(k, ids[start:start + size], bonus=k % 3 != 2))
        start, k = start + size, k + 1
        assert "".join(p[0] for p in segments.pieces) == TOKENIZER.decode(ids[:start]) == segments.text
    assert segments.text == text


def test_rounds_are_grouped_and_bonus_tokens_marked():
    segments = TextSegments(TOKENIZER.decode)
    segments.add(_record(0, TOKENIZER.encode("ab")))
    segments.add(_record(1, TOKENIZER.encode("c")))
    out = segments.html("libraspec")
    assert out.count('title="round') == 2
    assert [p[1] for p in segments.pieces] == ["draft", "bonus", "bonus"]


def test_model_text_and_prompt_are_escaped():
    evil = "<script>alert(1)</script> & <b>"
    segments = TextSegments(TOKENIZER.decode)
    segments.add(_record(0, TOKENIZER.encode(evil)))
    out = column_html("static", segments, summarize([_record(0, [5, 6])]), rank=1)
    assert "<script>" not in out and html.escape(evil[:-1]) in out
    status = status_html("Racing", prompt=evil, notes=[evil])
    assert "<script>" not in status and status.count(html.escape("<script>")) == 2


def test_column_without_rounds_shows_placeholder():
    out = column_html("oracle", None, None, None, waiting="press <Run>")
    assert "press &lt;Run&gt;" in out and "rounds –" in out


def test_settings_defaults_and_integral_floats():
    checked = check_settings(Settings(d_max=24.0, max_new_tokens=64.0, seed=3.0), n=15)
    assert checked.static_length == 15 and checked.d_max == 24 and isinstance(checked.d_max, int)
    assert check_settings(Settings(static_length=0), n=7).static_length == 7


@pytest.mark.parametrize("bad, message", [
    (dict(alpha=math.nan), "alpha must be a finite"),
    (dict(alpha=math.inf), "alpha must be a finite"),
    (dict(alpha=0.0), "alpha must be > 0"),
    (dict(d_max=14), "block size n = 15"),
    (dict(d_max=D_MAX_CAP + 1), "d_max must be between"),
    (dict(d_max=24.5), "d_max must be an integer"),
    (dict(temperature=math.nan), "temperature must be a finite"),
    (dict(temperature=2.0), "temperature"),
    (dict(max_new_tokens=None), "max new tokens must be an integer"),
    (dict(seed=True), "seed must be an integer"),
])
def test_settings_out_of_range_are_refused(bad, message):
    with pytest.raises(ValueError, match=message):
        check_settings(Settings(**bad), n=15)
