"""Autoscaling decisions: from what a fleet shows now to how many replicas it should have.

Pure and deterministic, like the routers beside it (no clock, no I/O), so the simulator's fleet
(harness/backends/sim/autoscale.py) and a live router later take the same decisions from the
same signals. A policy names one signal and two thresholds:

  queue  requests outstanding per serving replica (routed, not finished): over `up` adds
         replicas, under `down` removes one.
  kv     the serving replicas' mean share of KV blocks in use: over `up` adds, under `down` removes.
  slo    SLO attainment over the last window (the share of TBT and TTFT samples within the
         experiment's limits): under `up` adds, at or over `down` removes (a fleet that meets its
         SLO everywhere is tried one replica smaller).

The count it decides is of provisioned replicas (serving + warming), clamped to [min, max];
draining replicas are on their way out and not counted. While a replica warms up (its cold start)
nothing more is added or removed: the cold start is the policy's cooldown, so one burst does not
buy a replica per decision before the first one could serve.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

# Each policy's thresholds when none are given: starting points to tune per deployment, not
# measured facts (what HPA-style autoscalers ship as examples): (up, down).
DEFAULT_THRESHOLDS: dict[str, tuple[float, float]] = {
    "queue": (16.0, 4.0),  # outstanding requests per replica
    "kv": (0.8, 0.3),  # share of KV blocks in use
    "slo": (0.95, 0.99),  # share of SLO samples met: under 0.95 add, at 0.99 or more remove
}
POLICIES = tuple(DEFAULT_THRESHOLDS)


@dataclass(frozen=True)
class ScaleSignals:
    """What the fleet shows at a decision."""

    serving: int  # replicas that take new requests
    warming: int  # replicas loading their weights (no requests yet)
    outstanding: int  # requests routed to the serving replicas and not finished
    kv_used_fraction: float  # the serving replicas' mean share of KV blocks in use
    attainment: float | None = None  # share of the window's SLO samples met; None: no samples


@dataclass(frozen=True)
class ScalePolicy:
    """A named policy, its bounds, and its thresholds (None: the policy's default)."""

    name: str
    min_replicas: int = 1
    max_replicas: int = 8
    up: float | None = None
    down: float | None = None
    step: int = 1  # replicas added at once

    def __post_init__(self) -> None:
        if self.name not in DEFAULT_THRESHOLDS:
            raise ValueError(f"unknown autoscale policy {self.name!r}; known: {', '.join(POLICIES)}")
        if self.min_replicas < 1:
            raise ValueError(f"min_replicas must be >= 1, got {self.min_replicas}")
        if self.max_replicas < self.min_replicas:
            raise ValueError(f"min_replicas {self.min_replicas} > max_replicas {self.max_replicas}")
        if self.step < 1:
            raise ValueError(f"step must be >= 1, got {self.step}")
        up, down = self.thresholds
        if not (math.isfinite(up) and math.isfinite(down)) or (up > down if self.name == "slo" else up <= down):
            order = "up <= down" if self.name == "slo" else "up > down"
            raise ValueError(f"policy {self.name}: thresholds must be finite with {order}, got up={up} down={down}")

    @property
    def thresholds(self) -> tuple[float, float]:
        up, down = DEFAULT_THRESHOLDS[self.name]
        return (up if self.up is None else float(self.up), down if self.down is None else float(self.down))


def signal_of(policy: ScalePolicy, s: ScaleSignals) -> float | None:
    """The policy's signal (None: nothing to judge, e.g. a window without SLO samples)."""
    if policy.name == "queue":
        return s.outstanding / s.serving if s.serving else math.inf
    if policy.name == "kv":
        return s.kv_used_fraction
    return s.attainment


def desired_replicas(policy: ScalePolicy, s: ScaleSignals) -> int:
    """Provisioned replicas (serving + warming) the fleet should have after this decision."""
    now = s.serving + s.warming
    bounded = min(max(now, policy.min_replicas), policy.max_replicas)
    value = signal_of(policy, s)
    if s.warming or value is None or bounded != now:
        return bounded
    up, down = policy.thresholds
    if policy.name == "slo":
        grow, shrink = value < up, value >= down
    else:
        grow, shrink = value > up, value < down
    if grow:
        return min(now + policy.step, policy.max_replicas)
    if shrink:
        return max(now - 1, policy.min_replicas)
    return now


def drain_choice(outstanding: list[int]) -> int:
    """Which serving replica to drain: the one with the fewest requests outstanding (it frees its
    GPUs soonest); ties go to the newest (the highest index), so the oldest replicas stay."""
    return min(range(len(outstanding)), key=lambda i: (outstanding[i], -i))
