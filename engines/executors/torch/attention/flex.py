"""FlexAttention backend (torch.nn.attention.flex_attention): the batch's visible keys packed
into one sequence and a document mask (same sequence, causal by absolute position, sliding
window) turned into a block-sparse mask once per iteration. On CUDA the kernel is compiled with
dynamic shapes; the first iterations pay the compile. Opt-in (attention_backend="flex"): the
compile time per new shape bucket is hard to bound in a short benchmark."""
from __future__ import annotations

import torch

from engines.executors.torch.attention.metadata import AttentionMetadata


def _import():
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except Exception:
        return None
    return create_block_mask, flex_attention


class FlexAttention:
    name = "flex"

    @staticmethod
    def available(device: torch.device, dtype: torch.dtype) -> bool:
        return _import() is not None

    def __init__(self) -> None:
        self._create_block_mask, fn = _import()
        self._fn = fn
        self._compiled = None

    def _kernel(self, device: torch.device):
        if device.type != "cuda":
            return self._fn  # eager (a reference-speed path) for CPU tests
        if self._compiled is None:
            self._compiled = torch.compile(self._fn, dynamic=True)
        return self._compiled

    def _mask(self, meta: AttentionMetadata, device: torch.device):
        if "flex" in meta.scratch:
            return meta.scratch["flex"]
        slots, cu_k = meta.packed_kv_slots()
        s = meta.num_seqs
        q_counts = torch.tensor(meta.query_lens, device=device)
        k_counts = (cu_k[1:] - cu_k[:-1]).long()
        q_seq = torch.repeat_interleave(torch.arange(s, device=device), q_counts)
        k_seq = torch.repeat_interleave(torch.arange(s, device=device), k_counts)
        ctx = torch.tensor(meta.context_lens, device=device)
        kv_start = torch.tensor([meta.kv_start(i) for i in range(s)], device=device)
        q_pos = torch.arange(len(q_seq), device=device) - meta.cu_query[:-1].long()[q_seq] + ctx[q_seq]
        k_pos = torch.arange(len(k_seq), device=device) - cu_k[:-1].long()[k_seq] + kv_start[k_seq]
        window = meta.sliding_window

        def mask_mod(b, h, qi, ki):
            ok = (q_seq[qi] == k_seq[ki]) & (k_pos[ki] <= q_pos[qi])
            if window is not None:
                ok = ok & (k_pos[ki] > q_pos[qi] - window)
            return ok

        # Compiled on a GPU: the eager path materializes the whole [queries, keys] mask first.
        block_mask = self._create_block_mask(mask_mod, None, None, len(q_seq), len(k_seq), device=device,
                                             _compile=device.type == "cuda")
        meta.scratch["flex"] = block_mask
        return block_mask

    def forward(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        slots, _ = meta.packed_kv_slots()
        block_mask = self._mask(meta, q.device)
        k = k_cache.flatten(0, 1).index_select(0, slots).transpose(0, 1).unsqueeze(0)  # [1, Hk, Tk, D]
        v = v_cache.flatten(0, 1).index_select(0, slots).transpose(0, 1).unsqueeze(0)
        qq = q.transpose(0, 1).unsqueeze(0)  # [1, Hq, T, D]
        out = self._kernel(q.device)(qq, k, v, block_mask=block_mask, scale=meta.scale,
                                     enable_gqa=q.shape[1] != k_cache.shape[2])
        return out.squeeze(0).transpose(0, 1).contiguous()
