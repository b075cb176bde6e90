"""MLP activations."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    gate, up = x.chunk(2, dim=-1)
    return F.silu(gate) * up


class SiluAndMul(nn.Module):
    """SwiGLU: the fused gate/up output [.., 2I] -> silu(gate) * up [.., I]."""
    fusible = ("act_fn",)  # layers/fused.py may swap it for a compiled version

    def __init__(self) -> None:
        super().__init__()
        self.act_fn = silu_and_mul

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act_fn(x)


class Gelu(nn.Module):
    """Exact (erf) GELU, Falcon's activation."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x)
