"""search.growth: the capacity search's bracket step, from the config through the serial and the
round-by-round search; bad values refused in one line."""
from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.errors import HarnessError
from harness.backends import open_backend
from harness.config import compose, plan_experiment
from harness.search.capacity import Probe, find_capacity
from harness.search.probe import search_capacity
from harness.search.rounds import SearchBounds, find_capacity_rounds
from harness.settings.search import SearchSettings
from harness.typed import typed


def oracle(cap: float, calls: list):
    def probe(qps: float) -> Probe:
        calls.append(qps)
        return Probe(qps, qps <= cap)

    return probe


def test_default_is_doubling():
    assert SearchSettings().growth == 2.0
    assert SearchBounds().growth == 2.0


@pytest.mark.parametrize("bad", [1.0, 0.5, -2.0, math.inf, math.nan])
def test_bad_growth_is_one_line(bad):
    with pytest.raises(HarnessError) as e:
        typed(SearchSettings, {"growth": bad}, "search")
    text = str(e.value)
    assert text.startswith("search: growth must be a finite factor > 1") and "\n" not in text


def test_rounds_step_by_the_bounds_growth():
    bounds = SearchBounds(start_qps=6.0, rel_tol=0.05, min_qps=0.01, max_qps=1000.0, growth=1.25)
    serial_calls: list[float] = []
    s = find_capacity(oracle(9.4, serial_calls), 6.0, 0.05, 0.01, 1000.0, growth=1.25)
    assert serial_calls[:3] == [6.0, 6.0 * 1.25, 6.0 * 1.25 * 1.25]
    for workers in (1, 3):
        calls: list[float] = []
        r = find_capacity_rounds(lambda rates: [oracle(9.4, calls)(q) for q in rates], workers, bounds)
        assert r.bracket == s.bracket  # the serial search's answer at this step, bit for bit
        if workers == 1:
            assert calls == serial_calls


@given(cap=st.floats(0.02, 500.0), start=st.floats(0.05, 50.0), growth=st.floats(1.05, 4.0),
       workers=st.integers(1, 5))
def test_any_step_brackets_the_capacity_and_rounds_agree(cap, start, growth, workers):
    bounds = SearchBounds(start, 0.05, 0.01, 1000.0, growth)
    s = find_capacity(oracle(cap, []), start, 0.05, 0.01, 1000.0, growth=growth)
    lo, hi = s.bracket
    assert lo <= cap < hi and hi / lo - 1 <= 0.05
    r = find_capacity_rounds(lambda rates: [oracle(cap, [])(q) for q in rates], workers, bounds)
    assert r.bracket == s.bracket


def test_the_config_sets_the_simulated_search_step():
    plan = plan_experiment(compose(["experiment=yi34b_tp2_strict", "scheduler=[vllm]", "search.num_requests=64",
                                    "search.start_qps=1", "search.growth=1.5", "search.rel_tol=0.1"]))
    assert plan.search.growth == 1.5
    r = search_capacity(plan, "vllm", open_backend(plan.job("vllm", progress=False)).run)
    rates = [p.qps for p in r.probes]
    turn = next(i for i, p in enumerate(r.probes) if p.passed != r.probes[0].passed)  # the bracket closes
    assert turn >= 1, rates
    sign = 1 if r.probes[0].passed else -1  # up by 1.5 while passing, down by 1.5 while failing
    assert rates[:turn + 1] == pytest.approx([1.5 ** (sign * k) for k in range(turn + 1)], rel=1e-12)
    lo, hi = r.bracket
    assert hi / lo - 1 <= 0.1 and hi <= 1.5 * lo


def test_the_run_header_names_the_step():
    from harness.config import compose, plan_experiment

    def header(*words):
        return plan_experiment(compose(["experiment=yi34b_tp2_strict", *words])).describe_probes()

    assert "doubled or halved" in header()
    assert "stepped by x1.5" in header("search.growth=1.5") and "doubled" not in header("search.growth=1.5")
