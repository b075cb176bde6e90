"""Is the load generator keeping up? A verdict from per-request dispatch lag (actual - planned send).

A client that falls behind sends requests later than the arrival process says, so the server sees
a smoother, lower load than planned and the run measures the wrong thing. Defaults: warn when the
P99 lag exceeds 1 ms, invalid past 10 ms (against inter-arrival gaps of tens of ms at paper rates,
10 ms would visibly reshape the arrival process).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class LagPolicy:
    quantile: float = 0.99
    warn_s: float = 0.001
    invalid_s: float = 0.010

    def __post_init__(self) -> None:
        if not 0 < self.quantile <= 1:
            raise ValueError(f"lag quantile must be in (0, 1], got {self.quantile}")
        if not 0 <= self.warn_s <= self.invalid_s:
            raise ValueError(f"need 0 <= warn_s <= invalid_s, got {self.warn_s}, {self.invalid_s}")


@dataclass(frozen=True)
class DispatchVerdict:
    status: str  # ok | warn | invalid
    lag_quantile_s: float
    lag_p50_s: float
    lag_max_s: float
    num_sent: int
    message: str

    @property
    def valid(self) -> bool:
        return self.status != "invalid"


def judge_dispatch(lags_s: np.ndarray, policy: LagPolicy = LagPolicy()) -> DispatchVerdict:
    lags = np.asarray(lags_s, dtype=np.float64)
    lags = lags[~np.isnan(lags)]
    if lags.size == 0:
        return DispatchVerdict("ok", 0.0, 0.0, 0.0, 0, "no request sent")
    q = float(np.quantile(lags, policy.quantile))
    p50, mx = float(np.median(lags)), float(lags.max())
    label = f"P{policy.quantile * 100:g} dispatch lag {q * 1e3:.3f} ms"
    if q > policy.invalid_s:
        return DispatchVerdict("invalid", q, p50, mx, lags.size,
                               f"{label} > {policy.invalid_s * 1e3:g} ms: the client fell behind its schedule; results invalid")
    if q > policy.warn_s:
        return DispatchVerdict("warn", q, p50, mx, lags.size, f"{label} > {policy.warn_s * 1e3:g} ms (warning)")
    return DispatchVerdict("ok", q, p50, mx, lags.size, f"{label} (ok)")
