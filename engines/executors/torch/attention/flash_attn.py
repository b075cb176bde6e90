"""FlashAttention-2 backend (the `flash_attn` package, CUDA, fp16/bf16), import-guarded.

Upstream flash-attn reads a paged cache only with pages of 256 tokens, while the engine core's
blocks are 16, so this backend gathers each sequence's visible keys into one packed buffer (one
index_select per layer) and calls the variable-length kernel. flash-attn aligns the causal mask
to the bottom-right corner when a sequence has more keys than queries, which is exactly a prefill
chunk over its cached context (and a decode over its whole context)."""
from __future__ import annotations

import torch

from engines.executors.torch.attention.metadata import AttentionMetadata


def _import():
    try:
        from flash_attn import flash_attn_varlen_func
    except Exception:  # not installed, or built for another torch/CUDA: fall back silently
        return None
    return flash_attn_varlen_func


class FlashAttnAttention:
    name = "flash_attn"

    @staticmethod
    def available(device: torch.device, dtype: torch.dtype) -> bool:
        return device.type == "cuda" and dtype in (torch.float16, torch.bfloat16) and _import() is not None

    def __init__(self) -> None:
        self._fn = _import()

    def forward(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        slots, cu_k = meta.packed_kv_slots()
        if "fa" not in meta.scratch:
            counts = cu_k[1:] - cu_k[:-1]
            meta.scratch["fa"] = (int(counts.max()), max(meta.query_lens))
        max_k, max_q = meta.scratch["fa"]
        k = k_cache.flatten(0, 1).index_select(0, slots)
        v = v_cache.flatten(0, 1).index_select(0, slots)
        window = (-1, -1) if meta.sliding_window is None else (meta.sliding_window - 1, 0)
        return self._fn(q, k, v, meta.cu_query, cu_k, max_q, max_k, softmax_scale=meta.scale, causal=True,
                        window_size=window)
