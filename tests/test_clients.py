"""Two visitors of one app share its model session but nothing of their own: one's Cancel does
not stop the other's sweep, and neither sees the other's races or fresh calibration run.

The tabs are called directly, as gradio calls them, with two requests of different gradio
sessions (tiny-llama pair, n = 7); tests/test_app.py checks the same through the API.
"""

from __future__ import annotations

import dataclasses
import html
import re
from types import SimpleNamespace

import pytest

gr = pytest.importorskip("gradio")

from ui import sweeps  # noqa: E402
from ui.calibration_tab import SOURCES, CalibrationTab  # noqa: E402
from ui.race_tab import RaceTabs  # noqa: E402
from ui.stepthrough import Inputs  # noqa: E402
from ui.sweep_tab import SweepTab  # noqa: E402
from ui.sweeps import EXAMPLES  # noqa: E402
from ui.teach_tab import TeachTab  # noqa: E402

LAYER = "app"  # tests/conftest.py

ALICE, BOB = SimpleNamespace(session_hash="alice"), SimpleNamespace(session_hash="bob")
SWEEP = ("2.2", "7, 8", EXAMPLES, 1, 8)  # two cells on one prompt: an AR run, then two LibraSpec runs


def sweep_until_running(tab: SweepTab, request) -> tuple:
    """Start `request`'s sweep and return it (a generator) with its status once its first run is done."""
    sweep = tab.sweep_live(request, *SWEEP)
    for status, *_ in sweep:
        if "Running: 1/3 runs" in status:
            return sweep, status
    raise AssertionError("the sweep ended before its first run")


def last_status(sweep) -> str:
    return [status for status, *_ in sweep][-1]


def test_one_visitors_cancel_leaves_the_others_sweep_running(session):
    tab = SweepTab(session)
    sweep, _ = sweep_until_running(tab, BOB)
    reply = tab.cancel(ALICE)  # Alice presses Cancel during Bob's sweep
    # AR, then the two cells replayed and each distinct decision decoded: 3 runs, or 2 when they tie
    final = last_status(sweep)
    assert re.search(r"Finished: ([23])/\1 runs on ", final)  # the result, not the last step's label
    assert "Result: Modeled, same drafts:" in final and "Measured" in final
    assert final.count(html.escape(sweeps.NOT_THE_RECOMMENDATION)) == 1  # the best cell is not the recommendation
    assert "No sweep of yours is running" in reply
    sweep, _ = sweep_until_running(tab, BOB)
    assert "Cancelling" in tab.cancel(BOB)  # Bob's own Cancel does stop his sweep
    assert "Cancelled: 1/3 runs" in last_status(sweep)


def test_a_fresh_calibration_run_stays_on_its_page(session):
    tab = CalibrationTab(session)
    source, summary, *_, fresh = list(tab.fresh_run(8, 7, False))[-1]
    assert source == SOURCES[1] and "submitted drafts" in summary and fresh  # `fresh`: Alice's page state
    assert "submitted drafts" in tab.show(ALICE, SOURCES[1], False, fresh)[0]
    assert tab.show(BOB, SOURCES[1], False, [])[0].startswith("No submitted drafts")  # Bob's page state


def test_races_are_seen_only_by_their_visitor(session):
    race_tab, teach_tab, calibration_tab = RaceTabs(session), TeachTab(session), CalibrationTab(session)
    *texts, summary = race_tab.race(ALICE, "Count to five.", max_new_tokens=8)
    run_id = summary["run_id"]
    assert summary["finished"] and texts[0] == texts[1] == texts[2]
    assert len(race_tab.export_trace(ALICE, run_id)) == 2
    with pytest.raises(gr.Error, match="no stored run"):
        race_tab.export_trace(BOB, run_id)
    last_race = dataclasses.astuple(Inputs(source="last race round"))
    assert "of the last race" in teach_tab.restart(ALICE, 0, *last_race)[3]
    refused = teach_tab.restart(BOB, 0, *last_race)[3]  # said in the step-through's text, not raised
    assert refused.startswith("**⚠ Not shown:**") and "no race yet" in refused
    assert calibration_tab.calibration(ALICE)["samples"] > 0
    assert calibration_tab.calibration(BOB)["samples"] == 0
    assert calibration_tab.show(BOB, SOURCES[0], False, [])[0].startswith("No submitted drafts")
    inspector = race_tab.inspector
    assert inspector.mode_changed(BOB, run_id, "libraspec") == gr.skip()  # nothing to show
    assert len(inspector.mode_changed(ALICE, run_id, "libraspec")) == 7
    assert inspector.inspect_round(BOB, run_id, "libraspec", 0) == gr.skip()
    assert len(inspector.inspect_round(ALICE, run_id, "libraspec", 0)) == 5
    assert inspector.jump_to_round(BOB, run_id, "libraspec", 0) == gr.skip()
    assert len(inspector.jump_to_round(ALICE, run_id, "libraspec", 0)) == 6
    with pytest.raises(gr.Error, match="Run a race first"):
        inspector.check_teach_round(BOB, run_id, "libraspec")
    with pytest.raises(gr.Error, match="LibraSpec's Algorithm 1"):
        inspector.check_teach_round(ALICE, run_id, "static")
    inspector.check_teach_round(ALICE, run_id, "libraspec")  # Alice's last race: it opens
    _, source, shown, cost = teach_tab.open_race_round(0)
    assert (
        "of the last race"
        in teach_tab.restart(ALICE, 0, *dataclasses.astuple(Inputs(source=source, round_index=shown, cost=cost)))[3]
    )
    assert [run.run_id for run in session.races.runs("alice")] == [run_id] and session.races.runs("bob") == []
