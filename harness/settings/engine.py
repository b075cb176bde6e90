"""`engine`: the engine core's switches, the same for every scheduler of an experiment."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineSettings:
    """`engine`: switches of the engine core every scheduler of the experiment runs with."""

    # Automatic prefix caching (engines/core/prefix_cache.py) for every scheduler; off as in the
    # paper's engines (a scheduler's own `prefix_caching: true` turns it on for that one alone:
    # engines.core.config.PER_SCHEDULER).
    prefix_caching: bool = False
    # A host-memory KV tier under the prefix cache of each engine instance, in GiB (engines/core/
    # kv_tier.py, priced over PCIe by engines/perf/offload.py); 0: none, evicted blocks are lost.
    kv_offload_gib: float = 0.0
    # The node's host memory the tier must fit in, GiB (a DGX A100 has 1 TiB; the catalog has no host memory).
    host_memory_gib: float = 1024.0
