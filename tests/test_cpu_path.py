"""The oneDNN CPU path: same numbers as nn.Linear to float32 rounding, same parameters."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from libraspec.models.cpu import PackedLinear, fast_cpu_path

LAYER = "unit"  # tests/conftest.py
pytestmark = [
    pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this torch build has no oneDNN"),
]


def _model() -> nn.Module:
    torch.manual_seed(0)
    embed = nn.Embedding(50, 24)
    head = nn.Linear(24, 50, bias=False)
    head.weight = embed.weight  # tied, like SmolLM2's lm_head
    return nn.Sequential(embed, nn.Linear(24, 40), nn.SiLU(), nn.Linear(40, 24), head)


@pytest.mark.parametrize("shape", [(3, 24), (2, 5, 24), (1, 1, 24)])
def test_matches_dense_linear(shape):
    torch.set_num_threads(1)
    dense = _model()
    fast = fast_cpu_path(_model())
    x = torch.randint(0, 50, shape[:-1])
    with torch.inference_mode():
        expected, got = dense(x), fast(x)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert torch.equal(got.argmax(-1), expected.argmax(-1))


def test_keeps_parameters_ties_and_state_dict():
    model = _model()
    keys = set(model.state_dict())
    fast_cpu_path(model)
    assert all(isinstance(model[i], PackedLinear) for i in (1, 3, 4))
    assert model[4].weight is model[0].weight
    assert set(model.state_dict()) == keys


def test_in_place_weight_change_is_seen():
    model = fast_cpu_path(_model())
    x = torch.randint(0, 50, (4,))
    with torch.no_grad():
        model[1].weight.mul_(2.0)
        reference = nn.functional.linear(model[0](x), model[1].weight, model[1].bias)
        torch.testing.assert_close(model[1](model[0](x)), reference, rtol=1e-5, atol=1e-5)


def test_autograd_falls_back_to_dense():
    model = fast_cpu_path(_model())
    loss = model(torch.randint(0, 50, (6,))).logsumexp(-1).sum()
    loss.backward()
    assert model[1].weight.grad is not None and model[1].weight.grad.abs().sum() > 0


def test_rejects_non_float32():
    with pytest.raises(ValueError, match="float32"):
        PackedLinear(nn.Linear(4, 4).to(torch.bfloat16))
