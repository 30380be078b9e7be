"""Bad input through the app's API (tiny-llama pair on 127.0.0.1): a clear error or a stated clamp.

Each case sends one race request and expects either a refusal whose message names the
problem (no prompt, a setting that is no number, an unknown model or drafter), or an answer
whose settings are clamped into range with a note naming the field, the values and the
allowed range (`ui.settings.check_settings`), or an inert rendering; the last test checks
the server still answers a normal request. NaN and infinity cannot travel through gradio_client
(its JSON encoder refuses out-of-range floats), so those cases are sent as a raw HTTP POST
to /gradio_api/call/race, whose server-side JSON parser accepts the `NaN` literal: the
server's own check refuses them.
"""

from __future__ import annotations

import functools
import json

import apptools
import pytest

pytest.importorskip("gradio_client")
httpx = pytest.importorskip("httpx")
from gradio_client.exceptions import AppError  # noqa: E402

from ui.run import RACE_MODES  # noqa: E402
from ui.settings import RACEABLE  # noqa: E402

LAYER = "app"  # tests/conftest.py

N = 7  # the tiny pair's block size
CONTROL = "👋🏽 שלום مرحبا \u202e\u200f reversed \x00\x07\x1b[31m red \r\n tab\t end"
race = functools.partial(apptools.race, max_new_tokens=8)  # short races: the cases test validation


REFUSED = [
    ("empty", dict(prompt=""), "prompt is empty"),
    ("whitespace only", dict(prompt="  \n\t \u3000 "), "prompt is empty"),
    ("100k characters", dict(prompt="x" * 100_000), "context window is 512 tokens"),
    ("alpha not a number", dict(alpha="abc"), "alpha must be a number, got 'abc'"),
    ("d_max not a number", dict(d_max="many"), "d_max must be a number, got 'many'"),
    ("unknown model", dict(model="gpt-5"), "model pair 'gpt-5' is not offered here; choose one of tiny-llama"),
    (
        "unknown drafter",
        dict(drafter="oracle"),
        "unknown drafter 'oracle'; choose one of dflash, fastdllm, eagle, lookup, hybrid",
    ),
]


@pytest.mark.parametrize("override, message", [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_refused_with_a_clear_message(client, override, message, capfd):
    capfd.readouterr()
    with pytest.raises(AppError, match=message):
        race(client, **override)
    # an ordinary refusal leaves no traceback in the server log (issue 45: 44 of them for refused inputs)
    assert "Traceback" not in capfd.readouterr().err


CLAMPED = [
    ("negative alpha", dict(alpha=-1.5), "alpha", 0.05, "alpha -1.5 -> 0.05 (allowed 0.05..64)"),
    ("zero alpha", dict(alpha=0.0), "alpha", 0.05, "alpha 0 -> 0.05"),
    ("d_max below n", dict(d_max=3), "d_max", N, f"d_max 3 -> {N} (allowed {N}..64)"),
    ("huge d_max", dict(d_max=10**9), "d_max", 64, "d_max 1000000000 -> 64"),
    ("fractional d_max", dict(d_max=24.5), "d_max", 24, "d_max 24.5 -> 24"),
    ("negative temperature", dict(temperature=-0.1), "temperature", 0.0, "temperature -0.1 -> 0"),
    ("zero max new tokens", dict(max_new_tokens=0), "max_new_tokens", 1, "max new tokens 0 -> 1 (allowed 1..512)"),
    ("negative static length", dict(static_length=-2), "static_length", 1, "static length -2 -> 1"),
    ("negative seed", dict(seed=-1), "seed", 0, "seed -1 -> 0"),
]


@pytest.mark.parametrize("override, field, value, note", [c[1:] for c in CLAMPED], ids=[c[0] for c in CLAMPED])
def test_clamped_with_a_stated_note(client, override, field, value, note):
    static, libraspec, oracle, summary = race(client, **override)
    assert summary["settings"][field] == value
    assert [n for n in summary["notes"] if n.startswith(note)] and summary["finished"]
    assert static == libraspec == oracle


def test_max_new_tokens_beyond_the_cap_and_the_context_is_clamped_once_with_the_reason(client):
    # a long prompt leaves the context window little room, so the clamped race decodes few tokens
    summary = race(client, prompt="y" * 400, max_new_tokens=100_000)[3]
    (note,) = [n for n in summary["notes"] if n.startswith("max new tokens 100000 -> ")]
    assert "context window" in note and summary["settings"]["max_new_tokens"] < 512 - 400


def raw_race(server: str, literal: str) -> tuple[str, str]:
    """POST a race whose alpha is a JSON literal (NaN, Infinity); returns (event, data) of the reply."""
    body = f'{{"data": ["Tell me a story.", {literal}, 24, 0, 0.0, 8, 0, "", "", "", 0, 32, 0]}}'
    posted = httpx.post(
        server + "gradio_api/call/race", content=body, headers={"Content-Type": "application/json"}, timeout=30
    )
    assert posted.status_code == 200, posted.text
    event_id = posted.json()["event_id"]
    reply = httpx.get(server + f"gradio_api/call/race/{event_id}", timeout=120).text
    lines = [line for line in reply.splitlines() if line.startswith(("event:", "data:"))]
    events = [line.split(":", 1)[1].strip() for line in lines if line.startswith("event:")]
    data = [line.split(":", 1)[1].strip() for line in lines if line.startswith("data:")]
    return events[-1], data[-1]


@pytest.mark.parametrize("literal", ["NaN", "-Infinity"])
def test_non_finite_alpha_is_refused_by_the_server(server, literal):
    with pytest.raises(ValueError, match="Out of range float"):
        json.dumps(float(literal.lower().replace("infinity", "inf")), allow_nan=False)  # why the raw POST
    event, data = raw_race(server, literal)
    assert event == "error" and "alpha must be a finite number" in data


def test_long_prompt_is_served_with_a_stated_clamp(client):
    static, libraspec, oracle, summary = race(client, prompt="y" * 420, max_new_tokens=200)
    clamp = [n for n in summary["notes"] if n.startswith("max new tokens 200 -> ")]
    assert clamp and "context window" in clamp[0]
    room = int(clamp[0].split(" -> ")[1].split()[0])
    assert summary["settings"]["max_new_tokens"] == room < 200 and summary["ar"]["tokens"] <= room
    assert static == libraspec == oracle and summary["finished"]


def test_emoji_right_to_left_and_control_characters_are_plain_text(client):
    static, libraspec, oracle, summary = race(client, prompt=CONTROL)
    # nothing was clamped (timing notes, a re-measured profile or a load change, may come and go with the load)
    assert static == libraspec == oracle and summary["finished"] and not [n for n in summary["notes"] if " -> " in n]


def test_html_in_the_prompt_is_rendered_inert(client):
    attack = '<script>alert("x")</script><img src=x onerror=alert(1)> & <b>bold</b>'
    job = client.submit(
        attack, 2.2, 24, N, 0.0, 8, 0, 0, 32, 0, "libraspec", "dflash", list(RACE_MODES), api_name="/race_live"
    )
    outputs = job.result(timeout=120)
    status, columns = outputs[0], outputs[1 : 1 + len(RACEABLE)]  # a column per raceable mode
    assert (
        "Prompt: &lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt; &amp; "
        "&lt;b&gt;bold&lt;/b&gt;" in status
    )
    for html in (status, *columns):
        assert "<script" not in html and "<img" not in html and "<b>bold" not in html
    texts = race(client, prompt=attack)
    assert texts[0] == texts[1] == texts[2]  # the API returns plain text, never HTML


def test_server_answers_a_normal_request_afterwards(client):
    static, libraspec, oracle, summary = race(client, prompt="Hello there!", max_new_tokens=12)
    assert static == libraspec == oracle and summary["finished"] and summary["model"] == "tiny-llama"
    assert summary["settings"] == {
        "alpha": 2.2,
        "d_max": 24,
        "libraspec_start": None,  # the whole run spec: LibraSpec starts at the drafter's n unless set
        "static_length": N,
        "temperature": 0.0,
        "max_new_tokens": 12,
        "seed": 0,
        "tree_depth": N,
        "node_budget": 32,
        "g4_initial": N,  # the whole run spec: G4 starts at min(static length, d_max)
        "failfast_threshold": 0.6,
        "failfast_step": 4,
    }
