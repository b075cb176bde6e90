"""Capacity search: the highest request rate (QPS) whose probe passes the SLO.

Bracket, then bisect: starting at `start_qps`, double while probes pass (or halve while they
fail; `growth` other than 2 steps by that factor instead, for a search started near its
answer: search.growth, harness.planner) until one passing and one failing rate enclose the capacity, then bisect until the bracket
is within `rel_tol` (the paper: ~2.5 %). Probes are cached by rate, so no rate runs twice. The
search assumes pass/fail is monotone in the rate and reports both ends of the final bracket.
`harness.search.rounds` runs this same search W probes at a time (search.workers).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Probe:
    qps: float
    passed: bool
    detail: object = None  # whatever the probe function returns besides the verdict


@dataclass(frozen=True)
class CapacityResult:
    capacity_qps: float  # highest passing rate; 0.0 when nothing passed
    lowest_failing_qps: float  # inf when nothing failed
    probes: tuple[Probe, ...]  # in the order they ran
    rounds: int = 0  # rounds of probes run at once (harness.search.rounds); serial: one per probe

    @property
    def saturated(self) -> bool:
        """True when even the highest rate tried passed: the capacity is at least capacity_qps."""
        return self.lowest_failing_qps == float("inf")

    @property
    def bracket(self) -> tuple[float, float]:
        return self.capacity_qps, self.lowest_failing_qps


def find_capacity(
    probe: Callable[[float], Probe], start_qps: float = 1.0, rel_tol: float = 0.025, min_qps: float = 1e-3,
    max_qps: float = 1e4, on_probe: Callable[[Probe], None] | None = None, growth: float = 2.0,
) -> CapacityResult:
    check_bounds(start_qps, rel_tol, min_qps, max_qps)
    if not growth > 1:
        raise ValueError(f"growth must be > 1, got {growth}")
    ran: dict[float, Probe] = {}

    def run(qps: float) -> Probe:
        if qps not in ran:
            result = probe(qps)
            ran[qps] = result
            if on_probe is not None:
                on_probe(result)
        return ran[qps]

    lo, hi = 0.0, float("inf")  # highest passing, lowest failing
    qps = start_qps
    while True:  # bracket
        if run(qps).passed:
            lo = qps
            if qps >= max_qps or hi < float("inf"):
                break
            qps = min(qps * growth, max_qps)
        else:
            hi = qps
            if qps <= min_qps or lo > 0:
                break
            qps = max(qps / growth, min_qps)
    while lo > 0 and hi < float("inf") and hi / lo - 1 > rel_tol:  # bisect
        mid = (lo + hi) / 2
        if run(mid).passed:
            lo = mid
        else:
            hi = mid
    return CapacityResult(lo, hi, tuple(ran.values()), rounds=len(ran))


def check_bounds(start_qps: float, rel_tol: float, min_qps: float, max_qps: float) -> None:
    if not (0 < min_qps <= start_qps <= max_qps):
        raise ValueError(f"need 0 < min_qps <= start_qps <= max_qps, got {min_qps}, {start_qps}, {max_qps}")
    if not 0 < rel_tol < 1:
        raise ValueError(f"rel_tol must be in (0, 1), got {rel_tol}")
