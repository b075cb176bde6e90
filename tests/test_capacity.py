"""Capacity search against monotone synthetic oracles."""
from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.search.capacity import Probe, find_capacity


def oracle(true_capacity: float, calls: list | None = None):
    def probe(qps: float) -> Probe:
        if calls is not None:
            calls.append(qps)
        return Probe(qps, qps <= true_capacity)

    return probe


@given(cap=st.floats(0.02, 500.0), start=st.floats(0.05, 50.0))
def test_brackets_the_true_capacity_within_tolerance(cap, start):
    r = find_capacity(oracle(cap), start_qps=start, rel_tol=0.025, min_qps=0.01, max_qps=1000)
    lo, hi = r.bracket
    assert lo <= cap < hi
    assert hi / lo - 1 <= 0.025
    assert all(p.passed == (p.qps <= cap) for p in r.probes)


def test_probes_never_repeat_and_count_is_small():
    calls = []
    r = find_capacity(oracle(3.7, calls), start_qps=1.0)
    assert len(calls) == len(set(calls)) == len(r.probes)
    assert len(calls) <= 12


def test_nothing_passes():
    r = find_capacity(oracle(0.0), start_qps=1.0, min_qps=0.01)
    assert r.capacity_qps == 0.0 and r.lowest_failing_qps == pytest.approx(0.01, rel=0.5)
    assert not any(p.passed for p in r.probes)


def test_everything_passes():
    r = find_capacity(oracle(math.inf), start_qps=1.0, max_qps=64)
    assert r.saturated and r.capacity_qps == 64 and r.lowest_failing_qps == math.inf


def test_bad_search_settings():
    with pytest.raises(ValueError):
        find_capacity(oracle(1), start_qps=0)
    with pytest.raises(ValueError):
        find_capacity(oracle(1), rel_tol=0)
