"""Normalization layers, computed in float32 and cast back as Hugging Face does, so fp16/bf16
models round at the same place as the reference."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    dtype = x.dtype
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(dtype)


def add_rms_norm(x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The residual sum and its norm: one kernel when compiled (layers/fused.py)."""
    s = x + delta
    return s, rms_norm(s, weight, eps)


class RMSNorm(nn.Module):
    fusible = ("norm_fn", "add_norm_fn")  # attributes layers/fused.py may swap for compiled versions

    def __init__(self, hidden: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden), requires_grad=False)
        self.norm_fn, self.add_norm_fn = rms_norm, add_rms_norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm_fn(x, self.weight, self.eps)

    def add_and_norm(self, x: torch.Tensor, delta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(x + delta, norm(x + delta))."""
        return self.add_norm_fn(x, delta, self.weight, self.eps)


class LayerNorm(nn.Module):
    def __init__(self, hidden: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden), requires_grad=False)
        self.bias = nn.Parameter(torch.zeros(hidden), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, self.eps)
