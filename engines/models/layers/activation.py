"""MLP activations."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class SiluAndMul(nn.Module):
    """SwiGLU: the fused gate/up output [.., 2I] -> silu(gate) * up [.., I]."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = x.chunk(2, dim=-1)
        return F.silu(gate) * up


class Gelu(nn.Module):
    """Exact (erf) GELU, Falcon's activation."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x)
