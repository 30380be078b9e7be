"""Calibration of drafter confidences: samples from records, ECE by hand, reliability and figures."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from libraspec.analysis.calibration import (
    BINS,
    acceptance_by_position,
    acceptance_samples,
    bin_edges,
    bin_index,
    expected_calibration_error,
    reliability_table,
)
from libraspec.records import RoundRecord
from libraspec.views import tuning_plots

LAYER = "unit"  # tests/conftest.py


def record(mode: str, k: int, q: list[float], d: int, accepted: int) -> RoundRecord:
    committed = tuple(range(accepted + 1))
    return RoundRecord(
        mode=mode,
        round_index=k,
        start_position=0,
        draft_tokens=tuple(range(len(q))),
        confidences=tuple(q),
        blocks_drafted=1,
        policy_steps=(),
        eps_bounds=(),
        chosen_length=d,
        accepted=accepted,
        committed_tokens=committed,
        bonus_token=0,
        oracle_length=None,
        draft_s=0.01,
        policy_s=0.0,
        verify_s=0.02,
        modeled_s=0.03,
        cumulative_tokens=accepted + 1,
        cumulative_s=0.03,
        cumulative_modeled_s=0.03,
    )


RECORDS = [
    record("libraspec", 0, [0.9, 0.8, 0.3, 0.2], d=3, accepted=1),  # positions 1..3, accepted 1
    record("static", 0, [0.95, 0.65, 0.05, 0.5], d=4, accepted=4),  # all four accepted
    record("oracle", 0, [0.9, 0.9, 0.9, 0.9], d=2, accepted=2),  # excluded by default
    record("ar", 0, [], d=0, accepted=0),
]


def test_ece_matches_a_hand_computed_example():
    q = [0.05, 0.15, 0.15, 0.95, 0.95, 1.0]
    accepted = [0, 1, 0, 1, 1, 0]
    # bin 0: conf 0.05, acc 0 -> 0.05 (1 sample); bin 1: conf 0.15, acc 0.5 -> 0.35 (2 samples);
    # bin 9 (q = 1 joins it): conf 2.9 / 3, acc 2 / 3 -> 0.3 (3 samples)
    expected = (1 * 0.05 + 2 * 0.35 + 3 * 0.3) / 6
    assert expected_calibration_error(q, accepted) == pytest.approx(expected) == pytest.approx(0.275)
    table = reliability_table(q, accepted)
    assert table["count"].tolist() == [1, 2, 0, 0, 0, 0, 0, 0, 0, 3]
    assert table.loc[9, "acceptance"] == pytest.approx(2 / 3) and math.isnan(table.loc[5, "acceptance"])


def test_ece_extremes_and_errors():
    assert expected_calibration_error([1.0, 1.0], [1, 1]) == 0.0
    assert expected_calibration_error([0.0, 1.0], [1, 0]) == pytest.approx(1.0)
    assert math.isnan(expected_calibration_error([], []))
    with pytest.raises(ValueError, match="differ in length"):
        expected_calibration_error([0.5], [1, 0])
    with pytest.raises(ValueError, match="0 or 1"):
        expected_calibration_error([0.5], [0.5])
    with pytest.raises(ValueError, match="bins"):
        expected_calibration_error([0.5], [1], bins=0)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1), st.booleans()), min_size=1, max_size=60), st.integers(1, 20))
def test_ece_is_a_weighted_mean_of_bin_gaps(samples, bins):
    q, accepted = np.array([s[0] for s in samples]), np.array([int(s[1]) for s in samples])
    table = reliability_table(q, accepted, bins)
    assert table["count"].sum() == len(samples)
    filled = table[table["count"] > 0]
    gaps = (filled["acceptance"] - filled["confidence"]).abs()
    assert expected_calibration_error(q, accepted, bins) == pytest.approx(
        float((gaps * filled["count"]).sum() / len(samples))
    )
    assert 0.0 <= expected_calibration_error(q, accepted, bins) <= 1.0


def test_a_confidence_on_an_edge_belongs_to_the_bin_above_it():
    """Bins are [lo, hi): q = 0.5 with 4 bins sits in [0.5, 0.75), beside q = 0.6, not in [0.25, 0.5)."""
    assert bin_edges(4).tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert bin_index([0.0, 0.25, 0.4999, 0.5, 0.75, 0.9999, 1.0], 4).tolist() == [0, 1, 1, 2, 3, 3, 3]
    # together in [0.5, 0.75): mean q 0.55, acceptance 0.5 -> ECE 0.05 (split apart it would be 0.55)
    assert expected_calibration_error([0.5, 0.6], [1, 0], bins=4) == pytest.approx(0.05)
    table = reliability_table([0.0, 0.5, 0.6, 1.0], [0, 1, 0, 1], bins=4)
    assert table["count"].tolist() == [1, 0, 2, 1]
    assert table.loc[2, "confidence"] == pytest.approx(0.55) and table.loc[2, "acceptance"] == 0.5
    assert len(reliability_table([], [])) == BINS == 10  # the app's calibration tab says "10 bins"


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 20), st.lists(st.integers(0, 400), min_size=1, max_size=30))
def test_every_confidence_lies_within_its_bins_edges(bins, numerators):
    q = np.array([k / 400 for k in numerators] + [k / bins for k in range(bins + 1)])  # edges included
    index = bin_index(q, bins)
    table = reliability_table(q, np.ones_like(q), bins)
    lo, hi = table["lo"].to_numpy()[index], table["hi"].to_numpy()[index]
    assert np.all((lo <= q) & ((q < hi) | (q == 1.0)))


def test_samples_label_the_accepted_prefix():
    samples = acceptance_samples(RECORDS)
    assert set(samples["mode"]) == {"libraspec", "static"}  # AR and oracle left out
    lib = samples[samples["mode"] == "libraspec"]
    assert lib["position"].tolist() == [1, 2, 3] and lib["accepted"].tolist() == [1, 0, 0]
    assert lib["q"].tolist() == [0.9, 0.8, 0.3]
    tested = acceptance_samples(RECORDS, tested_only=True)
    assert tested[tested["mode"] == "libraspec"]["position"].tolist() == [1, 2]  # i <= a + 1
    assert len(tested[tested["mode"] == "static"]) == 4
    assert len(acceptance_samples(RECORDS, modes=["oracle"])) == 2
    by_position = acceptance_by_position(samples)
    assert by_position["position"].tolist() == [1, 2, 3, 4]
    assert by_position["count"].tolist() == [2, 2, 2, 1]
    assert by_position["acceptance"].tolist() == [1.0, 0.5, 0.5, 1.0]
    assert acceptance_samples([]).empty and acceptance_by_position(acceptance_samples([])).empty


def test_calibration_figure_traces_for_a_known_record_set():
    samples = acceptance_samples(RECORDS)
    table = reliability_table(samples["q"], samples["accepted"])
    by_position = acceptance_by_position(samples)
    ece = expected_calibration_error(samples["q"], samples["accepted"])
    fig = tuning_plots.calibration_figure(table, by_position, ece)
    traces = {t.name: t for t in fig.data}
    assert {"acceptance rate", "perfect calibration", "acceptance by position", "mean q_i"} <= set(traces)
    assert list(traces["acceptance by position"].y) == [1.0, 0.5, 0.5, 1.0]
    bars = traces["acceptance rate"]
    assert list(bars.customdata) == table["count"].tolist() and sum(bars.customdata) == 7
    assert f"{ece:.3f}" in fig.layout.title.text
    empty = tuning_plots.calibration_figure(
        reliability_table([], []), acceptance_by_position(acceptance_samples([])), float("nan")
    )
    assert "n/a" in empty.layout.title.text


@pytest.mark.app  # imports ui/
def test_calibration_tab_summary_names_ece_and_alpha():
    from libraspec.cost import LatencyProfile
    from ui.calibration_summary import summarize_calibration

    profile = LatencyProfile.from_linear(0.02, 0.001, 0.005, 4, 25)
    text, figure = summarize_calibration(RECORDS, False, profile)
    assert "7 submitted drafts" in text and "ECE =" in text and "alpha = T_verify / (tau c)" in text
    assert summarize_calibration([], False, profile)[0].startswith("No submitted drafts")


@pytest.mark.app  # imports ui/
def test_the_tree_table_shows_only_once_there_are_tree_rounds():
    """Issue 45: the calibration tab showed an empty draft-tree table before anything ran."""
    from types import SimpleNamespace

    from ui.calibration_tab import CalibrationTab

    tab = CalibrationTab.__new__(CalibrationTab)
    tab.session = SimpleNamespace(profile=lambda: None)
    chain = [record("libraspec", k, [0.9, 0.6, 0.2], d=3, accepted=1) for k in range(4)]
    *_, text, table = tab._view(chain, False)
    assert table["visible"] is False and "No draft-tree rounds yet" in text
