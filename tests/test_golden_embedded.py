"""The embedded pair's golden runs (e2e: loads SmolLM2): the same round records as
tests/golden/embedded.json, compared as tests/test_golden.py compares the tiny pair's."""

from __future__ import annotations

import golden
import pytest
import torch
from apptools import needs_smollm2
from test_golden import compare

LAYER = "e2e"  # tests/conftest.py
pytestmark = [pytest.mark.slow, needs_smollm2()]


def test_embedded_runs_unchanged():
    torch.set_num_threads(1)
    compare("embedded", golden.embedded_runs())
