"""Probes that stop once their failure is certain (search.stop_early, issue 16 item 2): the give-up
thresholds never stop a probe that could still pass (against numpy's own quantiles), a stopped
probe's verdict equals the full run's, a passing probe is untouched, and the setting is its own
cache key."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.backends import open_backend
from harness.backends.base import GiveUp
from harness.config import compose
from harness.metrics import check_slo
from harness.records import STOPPED_EARLY
from harness.search.cache import cache_key
from harness.config import plan_experiment
from harness.search.probe import probe_outcome, probe_requests
from tests.test_sim_cluster import same

GIVE_UP = GiveUp(tbt_s=1.0, tbt_quantile=0.99, delay_s=2.0, delay_quantile=0.5)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(0.0, 3.0), min_size=1, max_size=400), st.sampled_from([0.5, 0.9, 0.99, 1.0]))
def test_enough_values_over_the_limit_make_each_quantile_exceed_it(values, q):
    x = np.array(values)
    over = int(np.count_nonzero(x > 1.0))
    g = GiveUp(1.0, q, 1.0, q)
    if over >= g.tbt_exceed_needed(len(x)):
        assert np.quantile(x, q) > 1.0  # linear interpolation: the TBT quantile
    if over >= g.late_needed(len(x)):
        assert np.quantile(x, q, method="higher") > 1.0  # the scheduling-delay quantile
    # and one value fewer over the limit can leave the 'higher' quantile within it (the rule is tight)
    if 0 < g.late_needed(len(x)) <= len(x):
        y = np.sort(np.where(x > 1.0, 0.5, x))
        y[len(y) - g.late_needed(len(x)) + 1:] = 2.0
        assert np.quantile(y, q, method="higher") <= 1.0


def test_a_probe_with_no_tbt_samples_never_gives_up_on_tbt():
    assert GIVE_UP.tbt_exceed_needed(0) > 10**12
    assert GIVE_UP.late_needed(1) == 1 and GIVE_UP.late_needed(2048) == 2048 - math.ceil(0.5 * 2047)


YI = (0.25, 0.5, 1.0, 1.5, 3.0)
PP = (0.1, 0.3, 0.6, 1.2, 2.4)  # around Llama-2-70B TP4-PP2's capacities


@pytest.mark.parametrize(("experiment", "scheduler", "rates"), [
    ("yi34b_tp2_strict", "sarathi", YI), ("yi34b_tp2_strict", "vllm", YI), ("yi34b_tp2_strict", "orca", YI),
    # pipeline parallelism: the pipelined loop (and its replay) watches too
    ("llama2_70b_tp4pp2_strict", "sarathi", PP), ("llama2_70b_tp4pp2_strict", "vllm", PP),
])
def test_a_stopped_probe_has_the_full_probe_s_verdict_and_a_passing_one_is_untouched(experiment, scheduler, rates):
    cfg = [f"experiment={experiment}", f"scheduler=[{scheduler}]", "search.num_requests=384"]
    full, early = (plan_experiment(compose([*cfg, f"search.stop_early={v}"])) for v in ("false", "true"))
    stopped = 0
    for qps in rates:
        reqs = probe_requests(full, qps)
        a = open_backend(full.job(scheduler, progress=False)).run(reqs)
        b = open_backend(early.job(scheduler, progress=False)).run(reqs)
        va, vb = check_slo(a.records, full.slo), check_slo(b.records, early.slo)
        assert va.passed == vb.passed, (qps, va.reason, vb.reason)
        if "stopped_early_s" in b.diagnostics:
            stopped += 1
            assert not vb.passed
            cut = [r for r in b.records if r.error == STOPPED_EARLY]
            assert cut and all(not r.completed for r in cut)
            assert "stopped early" in probe_outcome(early, scheduler, qps, b.records).verdict.reason
        else:
            for x, y in zip(a.records, b.records, strict=True):
                same(x, y)
    assert stopped >= 2  # the rule is exercised: the overloaded probes stopped


def test_stop_early_is_its_own_probe_cache_key():
    base = ["experiment=yi34b_tp2_strict", "search.num_requests=64"]
    assert cache_key(dict(compose(base)), "v") != cache_key(dict(compose([*base, "search.stop_early=true"])), "v")


FLEET = ["experiment=fleet_qwen3_32b_h100", "scheduler=[vllm]", "cluster.instances=2",
         "search.num_requests=512"]  # sessions
ROUTED = ["experiment=yi34b_tp2_strict", "scheduler=[sarathi,vllm]", "cluster.instances=2",
          "cluster.router=least_outstanding", "search.num_requests=384"]  # no sessions: routed as they arrive


@pytest.mark.parametrize(("cfg", "rates"), [(FLEET, (1.5, 5.0)), (ROUTED, (0.5, 5.0))])
def test_a_cluster_probe_stops_once_its_failure_is_certain_with_the_full_probe_s_verdict(cfg, rates):
    full, early = (plan_experiment(compose([*cfg, f"search.stop_early={v}"])) for v in ("false", "true"))
    for scheduler in full.schedulers:
        passed, stopped = _compare(full, early, scheduler, rates)
        assert passed and stopped, (scheduler, passed, stopped)  # each rate's side is exercised


def _compare(full, early, scheduler: str, rates) -> tuple[int, int]:
    """Each rate run whole and with stop_early: the same verdict; a stopped run says so in its
    records, its diagnostics and its verdict, and one not stopped is the whole run, record for record."""
    passed = stopped = 0
    for qps in rates:
        reqs = probe_requests(full, qps)
        a = open_backend(full.job(scheduler, progress=False)).run(reqs)
        b = open_backend(early.job(scheduler, progress=False)).run(reqs)
        va, vb = check_slo(a.records, full.slo), check_slo(b.records, early.slo)
        assert va.passed == vb.passed, (scheduler, qps, va.reason, vb.reason)
        if "stopped_early_s" in b.diagnostics:
            stopped += 1
            cut = [r for r in b.records if r.error == STOPPED_EARLY]
            assert cut and all(not r.completed for r in cut) and not vb.passed
            assert "stopped early" in probe_outcome(early, scheduler, qps, b.records).verdict.reason
        else:
            passed += vb.passed
            for x, y in zip(a.records, b.records, strict=True):
                same(x, y)
    return passed, stopped
