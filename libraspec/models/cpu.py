"""A faster CPU path for the target: linear layers through prepacked oneDNN kernels.

On this project's CPU (AMD EPYC, AVX2, no AVX-512, no bf16 hardware) about three
quarters of a target forward is `nn.Linear` (MKL sgemm by default). The same
matrices through oneDNN, with each weight reordered once into oneDNN's blocked
layout, are faster, most of all the 49,152 x 576 output head. That lowers the
verification cost in T_round(d) (docs/ARCHITECTURE.md, "What is timed"), which moves the best
speculative length d on this hardware; the measured `LatencyProfile` sees it.

What it saves, and that greedy argmax is unchanged, is measured in docs/MEASUREMENTS.md
("The CPU fast path"); the figures live there, not in this docstring.
"""

from __future__ import annotations

import torch
from torch import nn


class PackedLinear(nn.Module):
    """`nn.Linear` computed by `torch.ops.mkldnn._linear_pointwise` on a prepacked weight.

    Keeps the dense `weight` (and `bias`) as the same parameters, so code that reads
    `lm_head.weight`, tied embeddings and `state_dict()` keep working; the packed copy
    is a non-persistent buffer, rebuilt if the weight is modified in place. Results
    match `nn.Linear` to float32 rounding (another accumulation order), not bit for
    bit. When autograd must track the call, the dense path is used.
    """

    def __init__(self, linear: nn.Linear):
        super().__init__()
        if linear.weight.dtype != torch.float32 or linear.weight.device.type != "cpu":
            raise ValueError(
                f"PackedLinear needs a float32 nn.Linear on the CPU, got "
                f"{linear.weight.dtype} on {linear.weight.device}"
            )
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = linear.weight
        self.bias = linear.bias
        self.register_buffer("packed_weight", torch.empty(0), persistent=False)
        self._packed_version = -1
        self.repack()

    def repack(self) -> None:
        """Reorder the current dense weight into oneDNN's layout."""
        with torch.no_grad():
            self.packed_weight = torch.ops.mkldnn._reorder_linear_weight(self.weight.detach(), None)
        self._packed_version = self.weight._version

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., in) -> (..., out)
        tracked = [x, self.weight] + ([] if self.bias is None else [self.bias])
        if torch.is_grad_enabled() and any(t.requires_grad for t in tracked):
            return nn.functional.linear(x, self.weight, self.bias)
        if self.weight._version != self._packed_version:
            self.repack()
        bias = None if self.bias is None else self.bias.detach()
        return torch.ops.mkldnn._linear_pointwise(x.contiguous(), self.packed_weight, bias, "none", [], "")

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, oneDNN packed"


def fast_cpu_path(model: nn.Module) -> nn.Module:
    """Route every `nn.Linear` of a float32 CPU `model` (lm_head included) through oneDNN.

    Converts in place and returns `model` (what it saves: docs/MEASUREMENTS.md, "The CPU fast
    path"; greedy argmax is unchanged). Inference only pays off; autograd falls back to dense.
    """
    if not torch.backends.mkldnn.is_available():
        raise ValueError("oneDNN (mkldnn) is not available in this torch build")
    targets = [(name, module) for name, module in model.named_modules() if isinstance(module, nn.Linear)]
    for name, module in targets:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, PackedLinear(module))
    return model
