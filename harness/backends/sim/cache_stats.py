"""What an engine's prefix cache reports (diagnostics `prefix_cache`): its counters, and with a
host tier what it found there and moved."""
from __future__ import annotations

import dataclasses


def cache_stats(engine) -> dict:
    """The prefix cache's counters; with a host tier, what it found (host_hits) and moved too."""
    out = dataclasses.asdict(engine.blocks.stats)
    tier = engine.blocks.tier
    if tier is None:
        del out["host_hits"]  # a run without a tier reports what it reported before tiers existed
    else:
        out.update({f"tier_{k}": v for k, v in dataclasses.asdict(tier.stats).items()}, tier_blocks=tier.capacity_blocks)
    return out


def summed(each: list[dict]) -> dict:
    """A fleet's counters: every instance's summed."""
    return {k: sum(c[k] for c in each) for k in each[0]}
