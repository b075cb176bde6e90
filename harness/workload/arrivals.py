"""Arrival processes as pure functions: (rate, n, seed) -> absolute offsets in seconds.

Offsets are nondecreasing and start at the first gap, not at 0 (a run starts at 0 and the first
request arrives one gap later), except for trace replay, which keeps the trace's own times.
`arrival_offsets` checks the rate (where the process takes one), n and the seed, once for every
process; each process checks its own knobs.

Every random process draws a *standard* variate per gap and divides by the rate, so probes at
different rates with the same seed are exact scaled copies of one another: a capacity search
then compares rates, not random draws.

Processes (`process` mapping, from experiments/arrival/<name>.yaml):
  poisson         exponential gaps with mean 1/rate (the paper's workload).
  gamma           gamma gaps with mean 1/rate and coefficient of variation `cv` (burstiness:
                  cv > 1 burstier than Poisson, cv < 1 smoother, cv = 1 is Poisson in law).
  constant        gaps of exactly 1/rate.
  poisson_capped  COMPATIBILITY ONLY: the original artifact's generator, exponential gaps capped
                  at 3x the mean. E[min(X, 3/rate)] = (1 - e^-3)/rate, so the real rate is
                  1/(1 - e^-3) = 1.0524x the nominal one and the tail of long gaps is gone;
                  capacities measured with it read ~5 % high. Never the default.
  trace           the `arrived_at` column of `trace_file` (same rows as the dataset, after the
                  same max_total_tokens filter, so it pairs with dataset.sampling=sequential),
                  multiplied by `time_scale` (0.5 = twice as fast). `rate` is ignored unless
                  `scale_to_rate: true`, which rescales the times to a mean rate of `rate`.
  diurnal         a Poisson process whose rate follows a day: rate x (1 + amplitude x cos(2 pi
                  (t - peak_s) / period_s)), mean `rate` over a period (a day: period_s 86400, the
                  peak at `peak_s`, 14:00 by default, the trough half a period later), drawn by
                  time rescaling (unit-rate exponential gaps mapped through the integrated rate),
                  so the same seed gives the same arrivals in rate-time. amplitude in [0, 1).
  at_once         every request waiting at t = 0 (an offline batch: the engine's own batch size is
                  the only limit); the rate is ignored.
  closed_loop     a marker, not a schedule: every offset is 0 and the backend must keep at most
                  `concurrency` requests in flight, sending the next when one finishes. A
                  backend that does not honour `concurrency_limit(process)` would turn it into a
                  burst of n requests at t=0, so backends must check it.
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping

import numpy as np

from common.errors import HarnessError

from .distributions import number
from .seeding import ARRIVALS, check_seed, rng_for
from .trace_file import read_trace

CAP_FACTOR = 3.0  # the original artifact's gap cap, in units of the mean gap


def poisson(rate: float, n: int, seed: int) -> np.ndarray:
    gaps = rng_for(ARRIVALS, seed).standard_exponential(n)
    return np.cumsum(gaps / rate)


def poisson_capped(rate: float, n: int, seed: int) -> np.ndarray:
    gaps = np.minimum(rng_for(ARRIVALS, seed).standard_exponential(n), CAP_FACTOR)
    return np.cumsum(gaps / rate)


def gamma(rate: float, n: int, seed: int, cv: float = 1.0) -> np.ndarray:
    cv = number(cv, "arrival.cv", 0, above=True)
    shape = 1.0 / (cv * cv)  # gamma(k, 1/k) has mean 1 and CV 1/sqrt(k)
    gaps = rng_for(ARRIVALS, seed).standard_gamma(shape, n) / shape
    return np.cumsum(gaps / rate)


def diurnal(rate: float, n: int, seed: int, amplitude: float = 0.5, period_s: float = 86400.0,
            peak_s: float = 50400.0) -> np.ndarray:
    for key, v, ok in (("amplitude", amplitude, lambda x: 0 <= x < 1), ("period_s", period_s, lambda x: x > 0),
                       ("peak_s", peak_s, lambda x: True)):
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) or not ok(v):
            raise HarnessError(f"arrival.{key}: got {v!r}; amplitude must be in [0, 1), period_s > 0, peak_s a number")
    target = np.cumsum(rng_for(ARRIVALS, seed).standard_exponential(n))  # integrated rate at each arrival
    w, phase = 2 * math.pi / period_s, 2 * math.pi * peak_s / period_s

    def integrated(t: np.ndarray) -> np.ndarray:  # the integral of rate x (1 + a cos(w t - phase)) over [0, t]
        return rate * (t + amplitude / w * (np.sin(w * t - phase) + math.sin(phase)))

    lo, hi = target / (rate * (1 + amplitude)), target / (rate * (1 - amplitude))  # the rate stays in those bounds
    for _ in range(64):  # bisection: the integrated rate is increasing; 64 halvings reach float precision
        mid = (lo + hi) / 2
        below = integrated(mid) < target
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return hi


def constant(rate: float, n: int, seed: int) -> np.ndarray:
    return np.arange(1, n + 1, dtype=np.float64) / rate


def trace(rate: float | None, n: int, seed: int, trace_file: str | None = None, time_scale: float = 1.0,
          scale_to_rate: bool = False, max_total_tokens: int | None = None) -> np.ndarray:
    if not trace_file:
        raise HarnessError("arrival process 'trace' needs arrival.trace_file (a trace with an arrived_at column)")
    number(time_scale, "arrival.time_scale", 0, above=True)
    rows = read_trace(trace_file, max_total_tokens, need_arrivals=True)
    t = rows.arrived_at
    if n > t.size:
        raise HarnessError(f"{rows.path}: {n} arrivals asked for but the trace has {t.size} rows after filtering")
    t = t[:n] * float(time_scale)
    if scale_to_rate and n > 0:
        span = t[-1] - t[0]
        if span <= 0:
            raise HarnessError(f"{rows.path}: the first {n} arrivals have no time span; cannot scale to a rate")
        # mean rate over the replayed window = (n - 1) / span; scale so it equals `rate`
        t = t * ((n - 1) / span / rate)
    return t


def closed_loop(rate: float | None, n: int, seed: int, concurrency: int | None = None) -> np.ndarray:
    _concurrency(concurrency)
    return np.zeros(n)


def at_once(rate: float | None, n: int, seed: int) -> np.ndarray:
    return np.zeros(n)


def _concurrency(c: object) -> int:
    return number(c, "arrival.concurrency (closed_loop)", 1, integer=True)


def concurrency_limit(process: Mapping) -> int | None:
    """The closed-loop concurrency a backend must enforce, or None for open-loop processes."""
    return _concurrency(process.get("concurrency")) if process.get("name") == "closed_loop" else None


PROCESSES: dict[str, tuple[Callable[..., np.ndarray], tuple[str, ...]]] = {
    "poisson": (poisson, ()),
    "poisson_capped": (poisson_capped, ()),
    "gamma": (gamma, ("cv",)),
    "constant": (constant, ()),
    "diurnal": (diurnal, ("amplitude", "period_s", "peak_s")),
    "trace": (trace, ("trace_file", "time_scale", "scale_to_rate", "max_total_tokens")),
    "closed_loop": (closed_loop, ("concurrency",)),
    "at_once": (at_once, ()),
}
# Processes whose offsets do not depend on `rate` (rate may be None for them): a run under one is an
# offline throughput run (python -m harness runs it once per scheduler, no capacity search).
RATE_FREE = {"closed_loop", "at_once"}


def arrival_offsets(process: Mapping, rate: float, n: int, seed: int) -> np.ndarray:
    if not isinstance(process, Mapping):
        raise HarnessError(f"arrival process must be a mapping, got {type(process).__name__}")
    name = process.get("name")
    if name not in PROCESSES:
        raise HarnessError(f"unknown arrival process {name!r} (known: {', '.join(PROCESSES)})")
    fn, params = PROCESSES[name]
    n, seed = number(n, "number of arrivals", 0, integer=True), check_seed(seed)
    if name not in RATE_FREE and not (name == "trace" and not process.get("scale_to_rate")):
        rate = number(rate, "arrival rate (requests/s)", 0, above=True)
    kwargs = {k: process[k] for k in params if process.get(k) is not None}
    return fn(rate, n, seed, **kwargs)
