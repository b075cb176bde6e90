"""The price of a host-memory KV tier (engines/core/kv_tier.py): blocks copied between an
instance's GPUs and host memory over PCIe, each GPU over its own link (as vLLM's CPU offloading
copies each worker's shard), so a transfer takes as long as the busiest GPU's shard over the
node's PCIe path (the topology's `slow_link`, latency + bytes at its measured send bandwidth,
`operators.p2p_time`). PCIe is full duplex: an iteration's loads (host -> GPU) and stores
(GPU -> host) move at once, and the longer of the two is the time the iteration waits (neither is
overlapped with compute: loaded KV must be present before the prefill after it reads it, and an
evicted block's slot is overwritten by this iteration).

Host memory a block takes: every GPU's shard of it (replicated KV heads counted on each GPU).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .deployment import Deployment
from .hardware import get_topology
from .links import LinkSpec
from .operators import p2p_time

GIB = 1 << 30


@dataclass(frozen=True)
class KvOffload:
    link: LinkSpec  # GPU <-> host, one per GPU
    lane_bytes_per_block: float  # the busiest GPU's shard of one block
    host_bytes_per_block: float  # all GPUs' shards of one block

    def blocks_in(self, gib: float) -> int:
        """Blocks a tier of `gib` GiB of host memory holds."""
        return int(gib * GIB // self.host_bytes_per_block)

    def seconds(self, loads: int, stores: int) -> float:
        """Time an iteration waits for `loads` blocks in and `stores` blocks out (both at once)."""
        if not loads and not stores:
            return 0.0
        moved = np.asarray([loads, stores], dtype=np.float64) * self.lane_bytes_per_block
        times = np.where(moved > 0, p2p_time(moved, self.link), 0.0)
        return float(times.max())


def plan_kv_offload(d: Deployment, block_size: int) -> KvOffload:
    """The tier of an instance of `d` with `block_size`-token blocks, on the node `d` runs on."""
    m = d.model
    per_gpu = m.kv_bytes_per_token_per_gpu(d.tp, d.pp) * d.kv_bytes_per_element / m.bytes_per_param
    link = get_topology(d.host, d.gpu).slow_link
    return KvOffload(link, per_gpu * block_size, per_gpu * block_size * d.num_gpus)
