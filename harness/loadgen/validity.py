"""Is the load generator keeping up? A verdict from per-request dispatch lag (actual - planned send).

A client that falls behind sends requests later than the arrival process says, so the server sees
a smoother, lower load than planned and the run measures the wrong thing. Defaults: warn when the
P99 lag exceeds 1 ms, invalid past 10 ms (against inter-arrival gaps of tens of ms at paper rates,
10 ms would visibly reshape the arrival process).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.settings.load import LagPolicy  # backend.lag: the thresholds, a setting


@dataclass(frozen=True)
class ClientLoad:
    """What a run cost the client itself: the signs of a client at its limit."""

    cpu_s: float  # the client process's CPU time during the run (all its threads)
    wall_s: float
    max_connections: int
    peak_connections: int
    waited_for_connection: int  # requests that found every connection busy
    continuous_usage: bool  # whether it asked for usage on every event
    direct_sends: int = 0  # requests its pacer thread wrote itself, not waiting for the event loop
    realtime: bool = False  # whether its pacer and event loop ran under SCHED_FIFO
    wake_lag_s: float = float("nan")  # the lag quantile of the pacer thread's own wake-ups (pacer.py)
    load_average: float = float("nan")  # the host's 1-minute load average as the run ended

    @property
    def cpu_fraction(self) -> float:
        """Of one core: near 1 the event loop had no time to spare (it runs on one thread)."""
        return self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0

    def lag_cause(self, lag_s: float) -> str:
        """Why the client fell behind by `lag_s` (its lag quantile): its connections, its CPU, the
        host's CPUs (its pacer thread itself woke late: other processes held the cores), or its
        event loop (the pacer woke on time, the requests then waited for the loop)."""
        why = []
        if self.waited_for_connection:
            why.append(f"connections: {self.waited_for_connection} requests waited for a connection, all "
                       f"{self.max_connections} of the client's were busy (backend.max_connections)")
        if self.cpu_fraction >= CPU_SATURATED:
            why.append(f"CPU: the client used {self.cpu_fraction:.0%} of a core, it is CPU-bound (saturated)")
        if why:
            return "; ".join(why)
        load = f"; load average {self.load_average:.1f}" if self.load_average == self.load_average else ""
        if self.wake_lag_s >= 0.5 * lag_s:
            fix = ("" if self.realtime else "; realtime priority would give them a core first "
                   "(backend.client_realtime_priority, as root or with CAP_SYS_NICE)")
            return (f"host CPU: the client's own timer thread woke {self.wake_lag_s * 1e3:.1f} ms late, waiting "
                    f"for a core other processes held{load}{fix}")
        return (f"event loop: the timer thread woke on time ({self.wake_lag_s * 1e3:.2f} ms), then the requests "
                f"waited for the event loop, busy with other streams (client at {self.cpu_fraction:.0%} of a core"
                f"{load})")


CPU_SATURATED = 0.9  # of one core: the event loop and the pacer share the GIL, so one core is the ceiling
STRICT_SWITCH = "backend.strict=false keeps such probes, each with a warning"


@dataclass(frozen=True)
class DispatchVerdict:
    status: str  # ok | warn | invalid
    lag_quantile_s: float
    lag_p50_s: float
    lag_max_s: float
    num_sent: int
    message: str


def judge_dispatch(lags_s: np.ndarray, policy: LagPolicy = LagPolicy(), client: ClientLoad | None = None) -> DispatchVerdict:
    lags = np.asarray(lags_s, dtype=np.float64)
    lags = lags[~np.isnan(lags)]
    if lags.size == 0:
        return DispatchVerdict("ok", 0.0, 0.0, 0.0, 0, "no request sent")
    q = float(np.quantile(lags, policy.quantile))
    p50, mx = float(np.median(lags)), float(lags.max())
    label = f"P{policy.quantile * 100:g} dispatch lag {q * 1e3:.3f} ms"
    because = f" (cause: {client.lag_cause(q)})" if client is not None and q > policy.warn_s else ""
    if q > policy.invalid_s:
        return DispatchVerdict("invalid", q, p50, mx, lags.size,
                               f"{label} > {policy.invalid_s * 1e3:g} ms: the client fell behind its schedule{because}; "
                               f"results invalid ({STRICT_SWITCH})")
    if q > policy.warn_s:
        return DispatchVerdict("warn", q, p50, mx, lags.size, f"{label} > {policy.warn_s * 1e3:g} ms (warning){because}")
    return DispatchVerdict("ok", q, p50, mx, lags.size, f"{label} (ok)")
