"""The capacity search in rounds of W probes at once (search.workers): the serial search's answer
in fewer rounds, W=1 the serial search itself, resumable from the probe cache, refused where
probes cannot run in parallel."""
from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from harness.analysis.settings import differences as paper_differences
from harness.backends import open_backend
from harness.settings.experiment import HOW_NOT_WHAT
from harness.commands.main import main
from harness.config import compose
from harness.results.config_diff import differences
from harness.search.cache import ProbeCache, cache_key
from harness.search.capacity import Probe, find_capacity
from harness.search.executor import LocalProcessPool, searches_at_once
from harness.config import plan_experiment
from harness.search.probe import search_capacity
from harness.search.rounds import SearchBounds, find_capacity_rounds, plan_round

ROOT = Path(__file__).resolve().parent.parent
BOUNDS = SearchBounds(start_qps=1.0, rel_tol=0.025, min_qps=0.01, max_qps=1000.0)
SMALL = ["experiment=yi34b_tp2_strict", "scheduler=[vllm]", "search.num_requests=64"]


def oracle(cap: float, calls: list | None = None):
    def probe(qps: float) -> Probe:
        if calls is not None:
            calls.append(qps)
        return Probe(qps, qps <= cap)

    return probe


def rounds_of(probe, workers: int, bounds: SearchBounds = BOUNDS, log: list | None = None):
    return find_capacity_rounds(lambda rates: [probe(q) for q in rates], workers, bounds,
                                on_round=None if log is None else log.append)


def serial(probe, bounds: SearchBounds = BOUNDS):
    return find_capacity(probe, bounds.start_qps, bounds.rel_tol, bounds.min_qps, bounds.max_qps)


@given(cap=st.floats(0.005, 2000.0), start=st.floats(0.05, 50.0), workers=st.integers(1, 9))
def test_rounds_give_the_serial_answer_in_fewer_rounds(cap, start, workers):
    bounds = SearchBounds(start, 0.025, 0.01, 1000.0)
    s = serial(oracle(cap), bounds)
    calls, log = [], []
    r = rounds_of(oracle(cap, calls), workers, bounds, log)
    assert r.bracket == s.bracket  # bit for bit: the same floats
    assert len(calls) == len(set(calls)) == len(r.probes)  # no rate twice
    assert r.rounds == len(log) and all(len(x.rates) <= workers for x in log)
    assert r.rounds <= s.rounds
    if workers == 1:
        assert [(p.qps, p.passed) for p in r.probes] == [(p.qps, p.passed) for p in s.probes]
    if workers >= 3 and s.rounds >= 6:  # a full bisection level per extra worker doubling
        assert r.rounds <= math.ceil(s.rounds * 0.7), (s.rounds, r.rounds)


def test_rounds_scale_like_log_w_plus_one():
    # Capacity 1.3 QPS from 1 QPS: the serial search brackets [1, 2) in 2 probes, then bisects
    # 5 times; W = 3 probes a 4-section per round (2 levels), W = 7 an 8-section (3 levels).
    assert serial(oracle(1.3)).rounds == 7
    assert [rounds_of(oracle(1.3), w).rounds for w in (1, 3, 7)] == [7, 4, 3]
    assert plan_round({1.0: True, 2.0: False}, 3, BOUNDS) == [1.5, 1.75, 1.25]
    # Bracketing upward, a round probes W geometrically spaced rates.
    assert plan_round({1.0: True, 2.0: True}, 4, BOUNDS) == [4.0, 8.0, 16.0, 32.0]


@settings(max_examples=50)
@given(seed=st.integers(0, 10_000), workers=st.integers(2, 8))
def test_not_monotone_still_the_serial_answer(seed, workers):
    rng = random.Random(seed)
    table: dict[float, bool] = {}

    def coin(qps: float) -> Probe:
        return Probe(qps, table.setdefault(qps, rng.random() < 0.5))

    s = serial(coin)
    assert rounds_of(coin, workers).bracket == s.bracket


def test_a_round_that_loses_a_probe_is_an_error():
    with pytest.raises(RuntimeError, match="no probe"):
        find_capacity_rounds(lambda rates: [Probe(rates[0], True)], 3, BOUNDS)
    with pytest.raises(ValueError):
        find_capacity_rounds(lambda rates: [], 0, BOUNDS)


class CountingPool:
    """The local pool, recording which rates it was asked to run."""

    def __init__(self, pool: LocalProcessPool) -> None:
        self.pool, self.workers, self.ran = pool, pool.workers, []

    def map_unordered(self, fn, items):
        self.ran.extend(t.qps for t in items)
        return self.pool.map_unordered(fn, items)


def test_one_worker_runs_the_tasks_here_in_order():
    """The planner's plan.workers=1: no process is started (a lambda could not reach one)."""
    with LocalProcessPool(1) as one:
        assert list(one.map_unordered(lambda x: 2 * x, [3, 1, 2])) == [(0, 6), (1, 2), (2, 4)]
        assert one._pool is None


@pytest.fixture(scope="module")
def pool():
    with LocalProcessPool(4) as p:
        yield p


@pytest.fixture(scope="module")
def serial_run():
    plan = plan_experiment(compose(SMALL))
    return plan, search_capacity(plan, "vllm", open_backend(plan.job("vllm", progress=False)).run)


def _plan(workers: int):
    return plan_experiment(compose([*SMALL, f"search.workers={workers}"]))


def test_simulated_parallel_search_lies_in_the_serial_bracket(pool, serial_run):
    plan, fresh = serial_run
    assert fresh.rounds == len(fresh.probes) >= 6
    for workers in (2, 4):
        counting = CountingPool(pool)
        r = search_capacity(_plan(workers), "vllm", run=None, executor=counting)
        lo, hi = fresh.bracket
        assert lo <= r.capacity_qps < hi and r.bracket == fresh.bracket
        # W = 2 probes a midpoint and one quarter point: 1.5 bisection levels a round on average,
        # 1 at worst; from W = 3 on, 2 levels or more in every round.
        assert r.rounds <= fresh.rounds and (workers < 3 or r.rounds < fresh.rounds), (workers, r.rounds, fresh.rounds)
        assert sorted(counting.ran) == sorted(p.qps for p in r.probes)  # every probe ran in the pool
        by_rate = {p.qps: p for p in r.probes}
        for p in fresh.probes:  # the serial probes, run again in workers: the same measurements
            assert by_rate[p.qps].passed == p.passed
            assert by_rate[p.qps].detail.summary == p.detail.summary


def test_one_worker_is_the_serial_search(serial_run):
    plan, fresh = serial_run
    one = _plan(1)
    assert one.search.workers == 1
    r = search_capacity(one, "vllm", open_backend(one.job("vllm", progress=False)).run)
    assert (r.bracket, r.rounds) == (fresh.bracket, fresh.rounds)
    assert [(p.qps, p.passed, p.detail.verdict, p.detail.summary) for p in r.probes] == \
        [(p.qps, p.passed, p.detail.verdict, p.detail.summary) for p in fresh.probes]


class Interrupt(Exception):
    pass


def test_interrupted_parallel_search_resumes_from_the_cache(tmp_path, pool, serial_run):
    _, fresh = serial_run
    plan = _plan(3)
    cache = ProbeCache(tmp_path)
    seen = []

    def interrupt_after_four(p):
        seen.append(p.qps)
        if len(seen) == 4:  # in the second round
            raise Interrupt

    with pytest.raises(Interrupt):
        search_capacity(plan, "vllm", None, on_probe=interrupt_after_four, cache=cache, executor=pool)
    assert all(cache.load("vllm", plan.seed, q) is not None for q in seen)

    counting = CountingPool(pool)
    cached = []
    r = search_capacity(plan, "vllm", None, cache=cache, executor=counting,
                        on_probe=lambda p: cached.append(p.qps) if p.detail.records is None else None)
    assert set(seen) <= set(cached) and not set(seen) & set(counting.ran)  # finished probes not rerun
    assert counting.ran and r.bracket == fresh.bracket

    # A serial search's cache serves a parallel one: the same rates, the same files.
    serial_cache = ProbeCache(tmp_path / "serial")
    one = plan_experiment(compose(SMALL))
    search_capacity(one, "vllm", open_backend(one.job("vllm", progress=False)).run, cache=serial_cache)
    counting = CountingPool(pool)
    r = search_capacity(plan, "vllm", None, cache=serial_cache, executor=counting)
    assert r.bracket == fresh.bracket
    assert not set(counting.ran) & {p.qps for p in fresh.probes}


@pytest.mark.parametrize("args, message", [
    (["search.workers=0"], "search: workers must be >= 1"),
    (["search.workers=many"], "search.workers"),
    (["backend=live", "search.workers=2"], "cannot take parallel probes"),
])
def test_bad_workers_one_line_exit_2(tmp_path, capsys, args, message):
    assert main([*SMALL, *args, f"results_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("how", ["search.workers=8", "search.searches_at_once=2", "cluster.workers=2"])
def test_workers_change_no_cache_key_and_no_paper_setting(how):
    a, b = compose(SMALL), compose([*SMALL, how])
    a, b = OmegaConf.to_container(a), OmegaConf.to_container(b)
    assert cache_key(a, "v") == cache_key(b, "v")
    assert cache_key(a, "v") != cache_key({**a, "seed": 1}, "v")
    assert paper_differences(b, a) == ()
    assert differences(b, a, HOW_NOT_WHAT) == ()  # figure=all and nightly: the same experiment's run
    assert paper_differences({**b, "search": {**b["search"], "num_requests": 7}}, a) != ()


def test_command_line_prints_rounds_and_saves_the_serial_answer(tmp_path, serial_run):
    _, fresh = serial_run
    p = subprocess.run([sys.executable, "-m", "harness", *SMALL, "search.workers=3", f"results_dir={tmp_path}"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stderr
    rounds = [line for line in p.stderr.splitlines() if " round " in line]
    assert rounds[0].split("round 1: ")[1] == "3 probes at 0.5, 1, 2 QPS"  # the start, a step up and down
    assert "capacity in [" in rounds[1]
    summary = json.loads((Path(p.stdout.splitlines()[-1].removeprefix("results: ")) / "summary.json").read_text())
    vllm = summary["schedulers"]["vllm"]
    assert (vllm["capacity_qps"], vllm["lowest_failing_qps"]) == fresh.bracket
    assert vllm["rounds"] == len(rounds) < fresh.rounds
    assert f"vllm {vllm['rounds']} ({len(vllm['probes'])} probes)" in p.stdout


def test_searches_at_once_by_default_only_where_it_pays():
    plan = plan_experiment(compose(["experiment=yi34b_tp2_strict"]))
    cpus = len(os.sched_getaffinity(0))
    assert searches_at_once(plan.search, True, 3, None) == max(1, min(cpus, 3))
    assert searches_at_once(plan.search, False, 3, None) == 1  # a live server takes one probe at a time
    assert searches_at_once(plan.search, True, 1, None) == 1
    assert searches_at_once(plan.search, True, 3, LocalProcessPool(2)) == 1  # probes at once instead
    assert searches_at_once(plan.search, True, 3, None, one_of_many=True) == 1  # the launcher runs jobs side by side
    small = plan_experiment(compose(["experiment=yi34b_tp2_strict", "search.num_requests=64"]))
    assert searches_at_once(small.search, True, 3, None) == 1  # a process costs more than the search
    forced = plan_experiment(compose(["experiment=yi34b_tp2_strict", "search.num_requests=64", "search.searches_at_once=5"]))
    assert searches_at_once(forced.search, True, 3, None) == 3


def test_searches_at_once_save_what_one_after_another_saves(tmp_path):
    """Each scheduler's search in a process of its own: the same summary, requests and token times."""
    args = ["experiment=yi34b_tp2_strict", "scheduler=[sarathi,vllm,orca]", "search.num_requests=64", "progress=false",
            "cache=false"]
    out = {}
    for at_once in (1, 3):
        assert main([*args, f"search.searches_at_once={at_once}", f"results_dir={tmp_path / str(at_once)}"]) == 0
        (run,) = (tmp_path / str(at_once) / "yi34b_tp2_strict").iterdir()
        summary = json.loads((run / "summary.json").read_text())
        out[at_once] = (summary["schedulers"], pd.read_parquet(run / "requests.parquet"),
                        pd.read_parquet(run / "token_times.parquet"))
    assert out[1][0] == out[3][0] and list(out[1][0]) == ["sarathi", "vllm", "orca"]
    assert out[1][1].equals(out[3][1]) and out[1][2].equals(out[3][2])
