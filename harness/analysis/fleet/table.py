"""The fleet study's table: per workload, router, tier and scheduler, the capacity, the cache's
hit rate and the preemptions at it, and the day's GPU-hours at that capacity (harness/analysis/
fleet/day.py), against one demand per workload: the peak that today's fleet (load-only routing,
Sarathi-Serve, no tier) meets with exactly its replicas."""
from __future__ import annotations

import numpy as np
import pandas as pd

from harness.analysis.fleet import day
from harness.analysis.fleet.cells import INSTANCES, NOCACHE, ROUTERS, TIERS, WORKLOADS

BASE = ("least_outstanding", "gpu", "sarathi")  # today's fleet: whose capacity sets the day's peak
TIER_ORDER = (*TIERS, NOCACHE)


def peak_rates(rows: pd.DataFrame) -> dict[str, float]:
    """Workload -> the day's peak rate (QPS): today's fleet's capacity."""
    return {w: value(rows, w, *BASE) for w in WORKLOADS}


def fleet_table(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per (workload, router, tier, scheduler), in the study's order, with `gpu_hours`."""
    if rows.empty:
        return rows.assign(gpu_hours=[], starved=[])
    peaks = peak_rates(rows)
    out = rows.copy()
    gpus = out["num_gpus"] / out["instances"]
    out["gpu_hours"] = [day.gpu_hours(day.hourly_peak_rates(peaks[w]), c, INSTANCES, int(g)) if peaks[w] > 0 else np.nan
                        for w, c, g in zip(out["workload"], out["capacity_qps"], gpus)]
    out["starved"] = out["capacity_starvation"].fillna("").astype(str) != ""
    order = {k: i for i, k in enumerate((*WORKLOADS, *ROUTERS, *TIER_ORDER, "sarathi", "vllm"))}
    key = out["workload"].map(order) * 1e6 + out["router"].map(order) * 1e4 + out["tier"].map(order) * 1e2 + out["policy"].map(order)
    return out.assign(_k=key.fillna(1e9)).sort_values("_k").drop(columns="_k").reset_index(drop=True)


def value(table: pd.DataFrame, workload: str, router: str, tier: str, policy: str, column: str = "capacity_qps") -> float:
    hit = table[(table["workload"] == workload) & (table["router"] == router) & (table["tier"] == tier)
                & (table["policy"] == policy)]
    return float(hit[column].iloc[0]) if len(hit) else np.nan
