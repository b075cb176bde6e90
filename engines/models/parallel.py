"""Which tensor-parallel and pipeline rank this process is, and the collectives the layers use.

One process holds one (tp_rank, pp_rank) shard. Layers read the ranks when they are built (to
size their shards) and call the collectives in forward; with tp == 1 every collective is the
identity, so a single process needs no torch.distributed at all.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


@dataclass
class ParallelState:
    tp_rank: int = 0
    tp_size: int = 1
    pp_rank: int = 0
    pp_size: int = 1
    tp_group: Any = None  # torch.distributed process group of this stage's TP ranks

    @property
    def is_first_stage(self) -> bool:
        return self.pp_rank == 0

    @property
    def is_last_stage(self) -> bool:
        return self.pp_rank == self.pp_size - 1


_STATE = ParallelState()


def get_parallel() -> ParallelState:
    return _STATE


def set_parallel(state: ParallelState) -> None:
    global _STATE
    _STATE = state


def tp_all_reduce(x: torch.Tensor) -> torch.Tensor:
    st = _STATE
    if st.tp_size == 1:
        return x
    dist.all_reduce(x, group=st.tp_group)
    return x


def tp_all_gather(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Concatenate every TP rank's shard of `x` along `dim`, in rank order."""
    st = _STATE
    if st.tp_size == 1:
        return x
    parts = [torch.empty_like(x) for _ in range(st.tp_size)]
    dist.all_gather(parts, x.contiguous(), group=st.tp_group)
    return torch.cat(parts, dim=dim)
