"""A prefix cache's counters (PrefixCachingBlockManager.stats), in vLLM's names and units."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class PrefixCacheStats:
    """Counters since the engine started (vLLM's prefix_cache_queries/hits count tokens too)."""

    queries: int = 0  # tokens looked up: the prefill target of every admission, readmissions included
    hits: int = 0  # of those, tokens found cached
    query_blocks: int = 0  # full blocks the admissions could have found: (prefill_target - 1) // block_size
    hit_blocks: int = 0
    evictions: int = 0  # cached blocks whose content was dropped to make room (to the host tier, if any)
    host_hits: int = 0  # tokens found in the host tier after the GPU hits (loaded, not computed)

    @property
    def hit_rate(self) -> float:
        return self.hits / self.queries if self.queries else 0.0
