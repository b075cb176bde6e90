"""Tensor-parallel linear layers (Megatron-style).

A column-parallel layer splits its output features over the TP ranks (no communication: each
rank keeps its slice of the activations); a row-parallel layer splits its input features and
sums the partial products with one all-reduce. Pairing them (QKV -> attention -> O, gate/up ->
act -> down) costs one all-reduce per pair.

Every parameter carries a `weight_loader(param, full, shard_id)` that copies this rank's slice
of a full (unsharded) checkpoint tensor, so loading is the same for any tp.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from engines.models.parallel import get_parallel, tp_all_reduce


def _param(*shape: int) -> nn.Parameter:
    # Empty: every parameter is overwritten by the loader (checkpoint or random init).
    return nn.Parameter(torch.empty(*shape), requires_grad=False)


class ColumnParallelLinear(nn.Module):
    """y[:, slice of this rank] = x @ W[slice].T (+ b[slice])."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False) -> None:
        super().__init__()
        st = get_parallel()
        self.tp_rank, self.tp_size = st.tp_rank, st.tp_size
        if out_features % self.tp_size:
            raise ValueError(f"{out_features} output features do not split over tp={self.tp_size}")
        self.in_features = in_features
        self.out_local = out_features // self.tp_size
        self.weight = _param(self.out_local, in_features)
        self.weight.weight_loader = self._load
        self.bias = _param(self.out_local) if bias else None
        if bias:
            self.bias.weight_loader = self._load

    def _load(self, param: nn.Parameter, full: torch.Tensor, shard_id: object = None) -> None:
        n = param.shape[0]
        param.data.copy_(full.narrow(0, self.tp_rank * n, n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)


class MergedColumnParallelLinear(ColumnParallelLinear):
    """Several column-parallel outputs fused into one GEMM (gate and up of a SwiGLU MLP): the
    local weight holds this rank's slice of each part, one after the other."""

    def __init__(self, in_features: int, out_sizes: list[int], bias: bool = False) -> None:
        super().__init__(in_features, sum(out_sizes), bias)
        self.local_sizes = [s // self.tp_size for s in out_sizes]

    def _load(self, param: nn.Parameter, full: torch.Tensor, shard_id: object = None) -> None:
        i = int(shard_id)
        size = self.local_sizes[i]
        offset = sum(self.local_sizes[:i])
        param.data.narrow(0, offset, size).copy_(full.narrow(0, self.tp_rank * size, size))


class QKVParallelLinear(ColumnParallelLinear):
    """Q, K and V projections fused, split by heads. With fewer KV heads than TP ranks each KV
    head is replicated on tp / num_kv_heads ranks (the ranks whose query heads use it)."""

    def __init__(self, hidden: int, head_dim: int, num_heads: int, num_kv_heads: int, bias: bool = False) -> None:
        st = get_parallel()
        tp = st.tp_size
        self.head_dim = head_dim
        self.q_heads = num_heads // tp
        self.kv_heads = max(1, num_kv_heads // tp)
        self.kv_rank = st.tp_rank if num_kv_heads >= tp else st.tp_rank // (tp // num_kv_heads)
        local = (self.q_heads + 2 * self.kv_heads) * head_dim
        super().__init__(hidden, local * tp, bias)

    @property
    def q_size(self) -> int:
        return self.q_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.kv_heads * self.head_dim

    def _load(self, param: nn.Parameter, full: torch.Tensor, shard_id: object = None) -> None:
        if shard_id == "q":
            offset, size, start = 0, self.q_size, self.tp_rank * self.q_size
        elif shard_id in ("k", "v"):
            offset = self.q_size + (self.kv_size if shard_id == "v" else 0)
            size, start = self.kv_size, self.kv_rank * self.kv_size
        else:
            raise ValueError(f"QKV shard id must be q, k or v, got {shard_id!r}")
        param.data.narrow(0, offset, size).copy_(full.narrow(0, start, size))

    def split(self, qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)


class RowParallelLinear(nn.Module):
    """y = sum over ranks of x[:, slice] @ W[:, slice].T, + b once."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False) -> None:
        super().__init__()
        st = get_parallel()
        self.tp_rank, self.tp_size = st.tp_rank, st.tp_size
        if in_features % self.tp_size:
            raise ValueError(f"{in_features} input features do not split over tp={self.tp_size}")
        self.in_local = in_features // self.tp_size
        self.weight = _param(out_features, self.in_local)
        self.weight.weight_loader = self._load_weight
        self.bias = _param(out_features) if bias else None
        if bias:
            self.bias.weight_loader = lambda p, full, shard_id=None: p.data.copy_(full)

    def _load_weight(self, param: nn.Parameter, full: torch.Tensor, shard_id: object = None) -> None:
        param.data.copy_(full.narrow(1, self.tp_rank * self.in_local, self.in_local))

    def forward(self, x: torch.Tensor, reduce: bool = True) -> torch.Tensor:
        """With reduce=False the caller sums several partial outputs and all-reduces once
        (Falcon's parallel attention + MLP); the bias then rides on rank 0's part only."""
        y = F.linear(x, self.weight)
        if reduce:
            y = tp_all_reduce(y)
            return y if self.bias is None else y + self.bias
        if self.bias is not None and self.tp_rank == 0:
            y = y + self.bias
        return y
