"""GPU-hours for a day, derived from a measured capacity (autoscaling itself is another piece of
issue 39): the day is the diurnal curve of harness/workload/arrivals.py (experiments/arrival/
diurnal.yaml: rate x (1 + AMPLITUDE cos(2 pi (t - PEAK_S) / PERIOD_S))), and each hour holds as
many replicas as its highest rate needs at the fleet's measured capacity per replica:

    replicas(h)  = ceil(max rate in hour h / (fleet capacity / replicas measured))
    GPU-hours    = sum over the 24 hours of replicas(h) x GPUs per replica

The day's demand is one number per workload, its peak rate, the same for every configuration
compared (report.py: the capacity of today's fleet, load-only routing and Sarathi-Serve without a
tier, so that fleet needs exactly its 8 replicas at the peak).
"""
from __future__ import annotations

import math

import numpy as np

# experiments/arrival/diurnal.yaml's defaults (tests/test_analysis_fleet.py checks them against it)
AMPLITUDE = 0.5
PERIOD_S = 86400.0
PEAK_S = 50400.0
HOURS = 24


def hourly_peak_rates(peak_rate: float) -> np.ndarray:
    """The highest rate within each hour of a day whose highest rate is `peak_rate`. The curve is a
    cosine: its maximum over an hour lies at an end of the hour or at the peak (14:00, on the grid)."""
    mean = peak_rate / (1 + AMPLITUDE)
    t = np.arange(HOURS)[:, None] * 3600.0 + np.linspace(0.0, 3600.0, 61)[None, :]  # each minute of each hour
    rate = mean * (1 + AMPLITUDE * np.cos(2 * math.pi * (t - PEAK_S) / PERIOD_S))
    return rate.max(axis=1)


def replicas_per_hour(rates: np.ndarray, fleet_capacity: float, instances: int) -> np.ndarray:
    """Replicas each hour needs at `fleet_capacity` (QPS) measured on `instances` replicas; NaN
    when the capacity is unknown or zero."""
    if not (fleet_capacity > 0):
        return np.full(len(rates), np.nan)
    per_replica = fleet_capacity / instances
    # a rate within 1e-9 of a whole number of replicas' capacity needs that many, not one more
    return np.ceil(np.asarray(rates) / per_replica - 1e-9)


def gpu_hours(rates: np.ndarray, fleet_capacity: float, instances: int, gpus_per_replica: int) -> float:
    """The day's GPU-hours (each entry of `rates` is one hour)."""
    return float(replicas_per_hour(rates, fleet_capacity, instances).sum() * gpus_per_replica)
