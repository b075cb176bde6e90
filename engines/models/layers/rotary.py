"""Rotary position embedding, the "rotate half" (GPT-NeoX) form Llama, Mistral, Yi and Falcon
use. Angles come from the absolute positions of the batch's tokens, so a prefill chunk that
starts at position 1000 rotates exactly like the same tokens inside a full prefill."""
from __future__ import annotations

import torch
from torch import nn


class RotaryEmbedding(nn.Module):
    fusible = ("rotary_fn",)  # layers/fused.py may swap it for a compiled version

    def __init__(self, head_dim: int, theta: float) -> None:
        super().__init__()
        exponent = torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim
        self.register_buffer("inv_freq", 1.0 / (theta ** exponent), persistent=False)
        self.rotary_fn = rotate

    def forward(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q: [T, Hq, D], k: [T, Hk, D]; positions: [T]."""
        return self.rotary_fn(positions, q, k, self.inv_freq)


def rotate(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
           inv_freq: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    # Angles in float32 whatever the model dtype: positions in the thousands need the bits.
    freqs = positions.float().unsqueeze(-1) * inv_freq.float().unsqueeze(0)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos = emb.cos().to(q.dtype).unsqueeze(1)
    sin = emb.sin().to(q.dtype).unsqueeze(1)
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)
