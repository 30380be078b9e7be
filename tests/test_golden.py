"""Behaviour is pinned: the golden runs give the same round records (timings aside) as when
tests/golden/*.json was written (before the contracts refactor)."""

from __future__ import annotations

import golden
import pytest
import torch

LAYER = "unit"  # tests/conftest.py

# float32 kernels differ in their last bits between CPUs (an AMD EPYC machine gives confidences
# 1e-6 apart from the files written on an earlier one, an Intel Xeon up to 3.2e-6, and 4.4e-7 on a
# confidence of 0.03, 1.4e-5 relative): these fields compare within RTOL or ATOL, the rest (tokens,
# lengths, policy steps, bounds) exactly
FLOATS = ("confidences", "modeled_s", "cumulative_modeled_s")
RTOL, ATOL = 1e-5, 1e-5


def compare(name: str, runs: dict) -> None:
    """Every stored run, field by field over the fields it holds (runs added later hold more)."""
    expected = golden.load(name)
    assert set(runs) == set(expected)
    for key, records in runs.items():
        assert len(records) == len(expected[key]), key
        for got, want in zip(records, expected[key]):
            where = (key, got["round_index"])
            got = {k: got[k] for k in want}
            assert {k: v for k, v in got.items() if k not in FLOATS} == {
                k: v for k, v in want.items() if k not in FLOATS
            }, where
            for field in FLOATS:
                assert got[field] == pytest.approx(want[field], rel=RTOL, abs=ATOL), (*where, field)


def test_tiny_runs_unchanged():
    torch.set_num_threads(1)
    compare("tiny", golden.tiny_runs())
