"""A host-memory tier under the prefix cache (issue 39 item 2; vLLM's CPU KV offloading, LMCache,
Dynamo's KV block manager): a cached block evicted from GPU memory is copied to host memory
instead of dropped, and a later prompt that reaches it loads it back instead of computing it.

The tier keeps block hashes only (the engine core holds no tensors): at most `capacity_blocks`,
least recently stored or loaded evicted first. A block already in the tier is not copied again
(its content is the same: a hash chains every token before it). The transfers are counted, not
priced (the core has no clock): whoever runs the engine takes them (`drain`) after each
`schedule()` and prices them over the link between GPU and host (the simulator: engines/perf/
offload.py over PCIe). Off unless the engine is built with a tier (EngineConfig's host_kv_blocks).
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass


@dataclass
class TierStats:
    """Counters since the engine started, in blocks."""

    stores: int = 0  # GPU -> host copies (evictions from GPU memory of blocks not yet in the tier)
    loads: int = 0  # host -> GPU copies (admissions that found blocks here)
    evictions: int = 0  # blocks dropped from the tier for room


class HostTier:
    def __init__(self, capacity_blocks: int) -> None:
        if isinstance(capacity_blocks, bool) or not isinstance(capacity_blocks, int) or capacity_blocks < 1:
            raise ValueError(f"a host KV tier holds at least one block, got {capacity_blocks!r}")
        self.capacity_blocks = capacity_blocks
        self._lru: OrderedDict[int, None] = OrderedDict()  # hashes, least recently used first
        self.stats = TierStats()
        self._pending = [0, 0]  # loads, stores since the last drain

    def __contains__(self, block_hash: int) -> bool:
        return block_hash in self._lru

    def __len__(self) -> int:
        return len(self._lru)

    def store(self, block_hash: int) -> None:
        """A block evicted from GPU memory: copied here unless already here."""
        lru = self._lru
        if block_hash in lru:
            lru.move_to_end(block_hash)
            return
        lru[block_hash] = None
        self.stats.stores += 1
        self._pending[1] += 1
        if len(lru) > self.capacity_blocks:
            lru.popitem(last=False)
            self.stats.evictions += 1

    def load(self, block_hash: int) -> None:
        """A block copied back to GPU memory (it stays here too)."""
        self._lru.move_to_end(block_hash)
        self.stats.loads += 1
        self._pending[0] += 1

    def drain(self) -> tuple[int, int]:
        """(loads, stores) since the last drain: what the iteration about to run moves."""
        out = (self._pending[0], self._pending[1])
        self._pending = [0, 0]
        return out
