"""FlashInfer backend (CUDA), import-guarded. FlashInfer reads the paged cache in place with any
page size, and one "prefill" wrapper handles a mixed batch: a decode is a 1-token query. The
plan (indptrs, page lists) is made once per iteration and reused by every layer."""
from __future__ import annotations

import torch

from engines.executors.torch.attention.metadata import AttentionMetadata

_WORKSPACE_BYTES = 256 * 1024 * 1024


def _import():
    try:
        import flashinfer
    except Exception:
        return None
    return flashinfer


class FlashInferAttention:
    name = "flashinfer"

    @staticmethod
    def available(device: torch.device, dtype: torch.dtype) -> bool:
        return device.type == "cuda" and dtype in (torch.float16, torch.bfloat16) and _import() is not None

    def __init__(self) -> None:
        self._fi = _import()
        self._wrapper = None

    def _plan(self, q: torch.Tensor, k_cache: torch.Tensor, meta: AttentionMetadata) -> None:
        if "flashinfer" in meta.scratch:
            return
        if self._wrapper is None:
            workspace = torch.empty(_WORKSPACE_BYTES, dtype=torch.uint8, device=q.device)
            self._wrapper = self._fi.BatchPrefillWithPagedKVCacheWrapper(workspace, "NHD")
        bs = meta.block_size
        pages, indptr, last = [], [0], []
        for i, kv in enumerate(meta.kv_lens):
            n = -(-kv // bs)
            pages.extend(meta.block_tables[i, :n].tolist())
            indptr.append(indptr[-1] + n)
            last.append(kv - (n - 1) * bs)
        i32 = dict(dtype=torch.int32, device=q.device)
        self._wrapper.plan(
            meta.cu_query, torch.tensor(indptr, **i32), torch.tensor(pages, **i32), torch.tensor(last, **i32),
            q.shape[1], k_cache.shape[2], q.shape[2], bs, causal=True, sm_scale=meta.scale,
            window_left=-1 if meta.sliding_window is None else meta.sliding_window - 1,
            q_data_type=q.dtype, kv_data_type=k_cache.dtype,
        )
        meta.scratch["flashinfer"] = True

    def forward(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        self._plan(q, k_cache, meta)
        return self._wrapper.run(q, (k_cache, v_cache))
