"""Plain-torch backend built on F.scaled_dot_product_attention: all decodes of the batch in one
padded call, each prefill chunk in its own call with an explicit mask. Runs anywhere torch does;
the default on CPU and the GPU fallback when no FlashInfer / FlashAttention is installed."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from engines.executors.torch.attention.metadata import AttentionMetadata, gather_keys, visible_mask


class SdpaAttention:
    name = "sdpa"

    @staticmethod
    def available(device: torch.device, dtype: torch.dtype) -> bool:
        return True

    def _plan(self, meta: AttentionMetadata) -> dict:
        if "sdpa" in meta.scratch:
            return meta.scratch["sdpa"]
        dev = meta.block_tables.device
        starts = meta.query_starts
        decodes = [i for i, n in enumerate(meta.query_lens) if n == 1]
        plan: dict = {"prefills": [i for i, n in enumerate(meta.query_lens) if n > 1], "starts": starts}
        if decodes:
            idx = torch.tensor(decodes, dtype=torch.long, device=dev)
            kv = meta.kv_lens_t[idx]
            width = -(-max(meta.kv_lens[i] for i in decodes) // meta.block_size)
            k_pos = torch.arange(width * meta.block_size, device=dev)
            mask = visible_mask((kv - 1).unsqueeze(-1), k_pos.unsqueeze(0), meta.sliding_window)  # [Bd, 1, L]
            plan.update(decode_seqs=idx, decode_rows=torch.tensor([starts[i] for i in decodes], device=dev),
                        decode_tables=meta.block_tables[idx, :width], decode_mask=mask.unsqueeze(1))
        meta.scratch["sdpa"] = plan
        return plan

    def forward(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        plan = self._plan(meta)
        out = torch.empty_like(q)
        group = q.shape[1] // k_cache.shape[2]
        # Grouped-query heads are expanded explicitly: SDPA's enable_gqa is served only by its math
        # and flash kernels, and flash takes no mask, so on a GPU the expansion is what lets the
        # memory-efficient kernel run these masked calls.
        if "decode_seqs" in plan:
            rows, tables = plan["decode_rows"], plan["decode_tables"]
            b = tables.shape[0]
            # [Bd, blocks, block_size, H, D] -> [Bd, H, L, D]
            k = _expand(k_cache[tables].flatten(1, 2).transpose(1, 2), group, dim=1)
            v = _expand(v_cache[tables].flatten(1, 2).transpose(1, 2), group, dim=1)
            qd = q[rows].unsqueeze(2)  # [Bd, Hq, 1, D]
            o = F.scaled_dot_product_attention(qd, k, v, attn_mask=plan["decode_mask"], scale=meta.scale)
            out[rows] = o.view(b, q.shape[1], q.shape[2])
        starts = plan["starts"]
        for i in plan["prefills"]:
            n, c = meta.query_lens[i], meta.context_lens[i]
            lo, kv = meta.kv_start(i), c + n
            k = _expand(gather_keys(k_cache, meta.block_tables[i], kv)[lo:].transpose(0, 1), group, dim=0)  # [Hq, kv, D]
            v = _expand(gather_keys(v_cache, meta.block_tables[i], kv)[lo:].transpose(0, 1), group, dim=0)
            qi = q[starts[i]:starts[i] + n].transpose(0, 1)  # [Hq, n, D]
            mask = visible_mask(torch.arange(c, kv, device=q.device), torch.arange(lo, kv, device=q.device),
                                meta.sliding_window)
            o = F.scaled_dot_product_attention(qi, k, v, attn_mask=mask, scale=meta.scale)
            out[starts[i]:starts[i] + n] = o.transpose(0, 1)
        return out


def _expand(x: torch.Tensor, group: int, dim: int) -> torch.Tensor:
    """Repeat each KV head for the `group` query heads that share it."""
    return x if group == 1 else x.repeat_interleave(group, dim=dim)
