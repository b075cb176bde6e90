"""The paged KV cache: per layer of this stage, K and V tensors of [num_blocks, block_size,
kv_heads, head_dim]. Block ids are the engine core's (BlockManager), so the executor never
allocates or frees; it only writes and reads slots (slot = block * block_size + offset)."""
from __future__ import annotations

import torch


class PagedKVCache:
    def __init__(self, num_layers: int, num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device | str) -> None:
        self.num_blocks, self.block_size = num_blocks, block_size
        # One allocation: [layers, 2 (K/V), blocks, block_size, heads, dim].
        self.data = torch.zeros(num_layers, 2, num_blocks, block_size, num_kv_heads, head_dim, dtype=dtype, device=device)

    @staticmethod
    def bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
        return num_layers * 2 * num_kv_heads * head_dim * torch.empty((), dtype=dtype).element_size()

    def layer(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.data[i, 0], self.data[i, 1]

    def write(self, i: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store the new tokens' K and V ([T, heads, dim]) at their slots."""
        kc, vc = self.layer(i)
        kc.view(-1, *kc.shape[2:]).index_copy_(0, slots, k.to(kc.dtype))
        vc.view(-1, *vc.shape[2:]).index_copy_(0, slots, v.to(vc.dtype))
