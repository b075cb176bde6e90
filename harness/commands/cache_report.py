"""One line per scheduler that kept a prefix cache: what it held at the probe the table shows
(the capacity probe, or a fixed rate's), from the probe's saved rows (harness.metrics.summarize_cache)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from harness.metrics import CacheSummary, summarize_cache


def print_cache_lines(runs, plan, shown) -> None:
    """`runs`: the SchedulerRuns of the table; `shown(result)`: the probe it shows, or None."""
    for r in runs:
        sc = plan.schedulers[r.scheduler]  # None: a server of its own (backend=endpoint), whose cache we only see
        probe = shown(r.result)
        if probe is None or (sc is not None and r.scheduler not in plan.prefix_caching):
            continue
        c = cache_of(probe.detail.requests, plan.deployment.block_size)
        if sc is None and c.hit_requests == 0:
            continue
        print(f"{r.scheduler:<18} prefix cache at {probe.qps:.4g} QPS: {c.token_hit_rate:.1%} of prompt tokens found "
              f"({c.block_hit_rate:.1%} of blocks; {c.hit_requests} requests hit, {c.miss_requests} missed), "
              f"P50 TTFT {c.ttft_hit.p50:.3f} s hit / {c.ttft_miss.p50:.3f} s miss")


def cache_of(rows: pd.DataFrame, block_size: int) -> CacheSummary:
    """The probe's prefix-cache summary from its saved rows (probes cached before the column: none)."""
    cached = rows["cached_tokens"] if "cached_tokens" in rows else np.zeros(len(rows), np.int64)
    started = ~(rows["first_scheduled_s"].isna() & rows["first_token_s"].isna())
    return summarize_cache(rows["prompt_len"], cached, rows["first_token_s"] - rows["arrival_s"], started, block_size)


def cache_fields(rows: pd.DataFrame, block_size: int) -> dict:
    """The probe row's prefix-cache columns (harness.results.schema.ProbeRow)."""
    c = cache_of(rows, block_size)
    return {"cache_token_hit_rate": c.token_hit_rate, "cache_block_hit_rate": c.block_hit_rate,
            "ttft_p50_hit_s": c.ttft_hit.p50, "ttft_p50_miss_s": c.ttft_miss.p50,
            "ttft_p99_hit_s": c.ttft_hit.p99, "ttft_p99_miss_s": c.ttft_miss.p99}
