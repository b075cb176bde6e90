"""The reference backend: one sequence at a time, explicit scores, mask and softmax in float32.
Slow and obviously right; every other backend is checked against it."""
from __future__ import annotations

import torch

from engines.executors.torch.attention.metadata import AttentionMetadata, gather_keys, visible_mask


class ReferenceAttention:
    name = "reference"

    @staticmethod
    def available(device: torch.device, dtype: torch.dtype) -> bool:
        return True

    def forward(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        out = torch.empty_like(q)
        group = q.shape[1] // k_cache.shape[2]
        starts = meta.query_starts
        for i, (n, c) in enumerate(zip(meta.query_lens, meta.context_lens)):
            kv = c + n
            qi = q[starts[i]:starts[i] + n].float()  # [n, Hq, D]
            ki = gather_keys(k_cache, meta.block_tables[i], kv).float().repeat_interleave(group, dim=1)
            vi = gather_keys(v_cache, meta.block_tables[i], kv).float().repeat_interleave(group, dim=1)
            scores = torch.einsum("qhd,khd->hqk", qi, ki) * meta.scale
            q_pos = torch.arange(c, kv, device=q.device)
            mask = visible_mask(q_pos, torch.arange(kv, device=q.device), meta.sliding_window)
            probs = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
            out[starts[i]:starts[i] + n] = torch.einsum("hqk,khd->qhd", probs, vi).to(q.dtype)
        return out
