"""Token-count distributions written in a dataset config, drawn with a seeded generator.

A spec is one of:
  7                          every draw is 7
  {median: m, p90: q}        a lognormal with that median and 90th percentile (rounded, at least `low`)
  {mean: m}                  a geometric count >= 1 with mean m (a session's turns)
  {quantiles: [v0, ..., vK]} inverse CDF: K + 1 values at the levels 0, 1/K, ..., 1, interpolated
                             linearly between them (tables derived from real traces, data/lengths)
  {pmf: [p1, p2, ...]}       the value k with probability p_k (k = 1, 2, ...), normalized
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Mapping

import numpy as np

from common.errors import HarnessError

Z90 = 1.2815515655446004  # the standard normal's 90th percentile


def number(value, what: str, low: float, *, above: bool = False, integer: bool = False):
    """`value` if it is a finite number (an integer where `integer`, never a bool) >= `low` (> `low`
    where `above`), else one HarnessError naming `what`: the check every number of a workload's
    config gets (the numbers of a dataset, an arrival process, their distributions)."""
    if (isinstance(value, bool) or not isinstance(value, numbers.Integral if integer else numbers.Real)
            or not math.isfinite(value) or value < low or (above and value == low)):
        raise HarnessError(f"{what} must be {'an integer' if integer else 'a number'} {'>' if above else '>='} "
                           f"{low:g}, got {value!r}")
    return int(value) if integer else float(value)


def check_spec(spec, what: str, low: int = 1) -> None:
    """Raise a one-line HarnessError if `spec` is not a distribution spec (module docstring)."""
    draw(spec, 0, np.random.default_rng(0), what, low)


def draw(spec, n: int, rng: np.random.Generator, what: str, low: int = 1) -> np.ndarray:
    """`n` int64 draws of `spec`; `what` names the config key in errors."""
    if isinstance(spec, numbers.Integral) and not isinstance(spec, bool):
        if spec < low:
            raise HarnessError(f"{what} must be >= {low}, got {spec}")
        return np.full(n, int(spec), dtype=np.int64)
    if not isinstance(spec, Mapping) or len(spec) == 0:
        raise HarnessError(f"{what} must be an integer or a mapping (median/p90, mean, quantiles or pmf), got {spec!r}")
    keys = set(spec)
    if keys == {"median", "p90"}:
        median = number(spec["median"], f"{what}.median", max(low, 1e-9))
        p90 = number(spec["p90"], f"{what}.p90", median)
        sigma = math.log(p90 / median) / Z90
        out = np.rint(median * np.exp(sigma * rng.standard_normal(n)))
        return np.maximum(out, low).astype(np.int64)
    if keys == {"mean"}:
        mean = number(spec["mean"], f"{what}.mean", 1.0)
        return rng.geometric(1.0 / mean, n).astype(np.int64)
    if keys == {"quantiles"}:
        q = np.asarray(spec["quantiles"], dtype=np.float64)
        if q.ndim != 1 or q.size < 2 or not np.all(np.isfinite(q)) or np.any(np.diff(q) < 0) or q[0] < low:
            raise HarnessError(f"{what}.quantiles must be >= 2 nondecreasing numbers >= {low}")
        levels = np.linspace(0.0, 1.0, q.size)
        return np.rint(np.interp(rng.random(n), levels, q)).astype(np.int64)
    if keys == {"pmf"}:
        p = np.asarray(spec["pmf"], dtype=np.float64)
        if p.ndim != 1 or p.size < 1 or not np.all(np.isfinite(p)) or np.any(p < 0) or p.sum() <= 0:
            raise HarnessError(f"{what}.pmf must be non-negative weights of the values 1, 2, ...")
        return (rng.choice(p.size, size=n, p=p / p.sum()) + 1).astype(np.int64)
    raise HarnessError(f"{what}: unknown distribution keys {sorted(keys)} "
                       "(use one of: median+p90, mean, quantiles, pmf, or an integer)")


def describe(spec) -> str:
    if isinstance(spec, Mapping):
        if "quantiles" in spec:
            q = spec["quantiles"]
            return f"quantile table (median {q[len(q) // 2]:g})"
        if "pmf" in spec:
            return f"pmf over 1..{len(spec['pmf'])}"
        return ", ".join(f"{k} {v:g}" for k, v in spec.items())
    return str(spec)
