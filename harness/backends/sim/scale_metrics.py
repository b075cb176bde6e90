"""What an autoscaled run reports: SLO samples, replica lifetimes, and metrics window by window.

An SLO sample is judged at the moment its fate is known: a TBT sample (the gap before each output
token after the first) at its token's time, met if the gap is within the TBT limit; a request's
TTFT sample at its first token or at its deadline (arrival + TTFT limit), whichever comes first,
met if the first token came by then (so a request still waiting counts as missed once its
deadline passes, never as absent). The `slo` policy's attainment over its window and the
per-window table read the same samples (`slo_samples`).

GPU-hours are the integral of provisioned GPUs over time: each replica holds its GPUs from the
moment it is started (its cold start included) until it is retired (a drained replica when its
last request finishes, the others at the run's end).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np


def slo_samples(arrival: float, tokens: np.ndarray, tbt_s: float, ttft_s: float) -> tuple[np.ndarray, np.ndarray]:
    """(times, met) of one request's SLO samples so far (a TTFT sample timed after `now` is not
    known yet at `now`: callers count samples up to a time)."""
    deadline = arrival + ttft_s
    first = tokens[0] if len(tokens) else math.inf
    ttft_time = min(first, deadline)
    times = np.concatenate(([ttft_time], tokens[1:])) if len(tokens) else np.array([ttft_time])
    met = np.concatenate(([first <= deadline], np.diff(tokens) <= tbt_s)) if len(tokens) else np.array([False])
    return times, met


def attainment_between(samples: list[tuple[np.ndarray, np.ndarray]], lo: float, hi: float) -> float | None:
    """The share of samples in (lo, hi] that met the SLO (None: none there)."""
    met = total = 0
    for times, ok in samples:
        inside = (times > lo) & (times <= hi)
        total += int(np.count_nonzero(inside))
        met += int(np.count_nonzero(ok & inside))
    return met / total if total else None


@dataclass(frozen=True)
class ReplicaLife:
    """One replica of a scaled run: when it was started (GPUs held), could serve, was told to
    drain (inf: never) and was retired, and how many requests it got."""

    started_s: float
    ready_s: float
    drain_s: float
    end_s: float
    requests: int
    first_request_s: float  # arrival of the first request routed to it (NaN: none)
    last_request_s: float


@dataclass(frozen=True)
class Tick:
    """A decision: the fleet as the policy saw it and what it decided."""

    time_s: float
    serving: int
    warming: int
    draining: int
    signal: float | None
    desired: int


def gpu_hours(lives: list[ReplicaLife], gpus: int, lo: float = 0.0, hi: float = math.inf) -> float:
    """GPU-hours the replicas held within [lo, hi)."""
    held = sum(max(0.0, min(r.end_s, hi) - max(r.started_s, lo)) for r in lives)
    return held * gpus / 3600.0


def windows(lives: list[ReplicaLife], ticks: list[Tick], samples: list[tuple[np.ndarray, np.ndarray]],
            interval_s: float, end_s: float, gpus: int, usd: float) -> list[dict]:
    """One row per window [k interval, (k+1) interval) up to `end_s`: the fleet at its start
    (serving, warming, draining: the decision there, or t = 0's fleet), its SLO attainment, its
    GPU-hours and their cost."""
    n = max(1, math.ceil(end_s / interval_s))
    times = np.concatenate([t for t, _ in samples]) if samples else np.zeros(0)
    met = np.concatenate([m for _, m in samples]) if samples else np.zeros(0, bool)
    keep = np.isfinite(times)
    idx = np.minimum((times[keep] // interval_s).astype(np.int64), n - 1)
    total = np.bincount(idx, minlength=n)
    good = np.bincount(idx, weights=met[keep].astype(np.float64), minlength=n)
    at = {round(t.time_s / interval_s): t for t in ticks}
    rows = []
    for k in range(n):
        lo, hi = k * interval_s, (k + 1) * interval_s
        tick = at.get(k)
        if tick is not None:
            fleet = (tick.serving, tick.warming, tick.draining)
        else:
            fleet = (sum(r.ready_s <= lo < min(r.drain_s, r.end_s) for r in lives),
                     sum(r.started_s <= lo < r.ready_s for r in lives),
                     sum(r.drain_s <= lo < r.end_s for r in lives))
        hours = gpu_hours(lives, gpus, lo, hi)
        rows.append({"start_s": lo, "serving": fleet[0], "warming": fleet[1], "draining": fleet[2],
                     "attainment": float(good[k] / total[k]) if total[k] else None,
                     "gpu_hours": hours, "cost_usd": hours * usd})
    return rows


def report(lives: list[ReplicaLife], ticks: list[Tick], rows: list[dict], plan, end_s: float) -> dict:
    """The run's `autoscale` diagnostics (saved with the probe's row in summary.json)."""
    hours = gpu_hours(lives, plan.gpus_per_replica)
    return {"policy": plan.rule.name, "min_replicas": plan.rule.min_replicas, "max_replicas": plan.rule.max_replicas,
            "thresholds": list(plan.rule.thresholds), "interval_s": plan.interval_s, "window_s": plan.window_s,
            "cold_start_s": plan.cold_start_s, "gpus_per_replica": plan.gpus_per_replica,
            "gpu_hour_usd": plan.gpu_hour_usd, "end_s": end_s, "gpu_hours": hours, "cost_usd": hours * plan.gpu_hour_usd,
            "windows": rows, "replicas": [_finite(asdict(r)) for r in lives], "decisions": [asdict(t) for t in ticks]}


def _finite(row: dict) -> dict:
    """JSON has no infinity or NaN: a replica never drained has drain_s None, one never routed to no request times."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
