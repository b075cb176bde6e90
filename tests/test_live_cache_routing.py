"""Cache-aware routing live (issue 39): two in-repo replicas (the performance model's real-time
twin, prefix caching on) behind the in-repo router on loopback, agent sessions through it, and the
simulator's cluster on the same stream with the same router code (engines.routers). The fleet's
hit rate the router reports from its replicas' /metrics must agree with the simulated one.

Tolerances, and why:
- session_affinity: 0.01 (absolute, in token hit rate), as for one server (test_live_sessions):
  the ring places every session alike in both, so only timing differences inside a replica remain.
  Each session's requests land where the simulator put them (checked per request).
- prefix_aware and prefix_exact: 0.03. Both read load to break ties between replicas that match
  the same prefix (the second session of a system prompt), and a live request's outstanding count
  depends on when its predecessors' streams ended; one tie decided the other way moves the hit
  rate by at most one system prompt's blocks of the stream's ~45k prompt tokens (0.4 %), and a
  session split from its cached turns a little more, so a few such flips stay within 0.03.
"""
from __future__ import annotations

import contextlib
import dataclasses
import gc
import sys
import warnings
from concurrent.futures import ThreadPoolExecutor

import pytest

from engines.routers import make_router
from engines.schedulers import EngineConfig, make_engine
from engines.server.config import ServerConfig
from harness.backends.live import LiveServerSpec, run_live_result
from harness.backends.live.cluster import ClusterProcesses, ClusterSpec
from harness.backends.live.prometheus import measured, scrape
from harness.backends.sim import simulate_cluster
from harness.workload import load_workload, requests_at_rate
from tests.test_live_loopback import KV_TOKENS, MAX_LEN, OPTS
from tests.test_live_sessions import SCHED, SESSIONS, SLOW_SCALE, _Scaled
from tests.test_sim_sessions import cache_summary

pytestmark = pytest.mark.live  # starts a real server (pyproject.toml markers)

TOLERANCE = {"session_affinity": 0.01, "prefix_aware": 0.03, "prefix_exact": 0.03}
REPLICAS = 2


def _stream():
    # 4 system prompts: prefix routers have heads to spread; sessions of ~4 turns
    sessions = {**SESSIONS, "system_prompts": 4}
    return requests_at_rate(load_workload({"name": "t", "max_total_tokens": MAX_LEN, "sessions": sessions}, 80, 5),
                            {"name": "poisson"}, 4.0, 5)


def _simulated(reqs, name):
    engines = [make_engine(EngineConfig(SCHED, KV_TOKENS, MAX_LEN, prefix_caching=True)) for _ in range(REPLICAS)]
    stats: dict = {}
    records = simulate_cluster(reqs, engines, [_Scaled()] * REPLICAS, make_router(name), stats=stats)
    hits, queries = (sum(getattr(e.blocks.stats, k) for e in engines) for k in ("hits", "queries"))
    return records, hits / queries, stats["instance_requests"]


@pytest.fixture(scope="module")
def fleet_runs(alone_block):
    """One fleet a router, each started beside the other xdist workers; their three streams run at
    once, in one alone_block (tests/conftest.py). A stream is mostly waiting on the twin's real-time
    iterations: one fleet's run (client, router, two replicas) used 3.5 CPU-s over its 38 s stream
    (-n 0, load 2), so three at once hold about a quarter of one core, not the busy workers that
    alone_block keeps away; each fleet's caches and counters are its own. The three clients share
    this process: what a run sets for its time and restores after (the GIL's switch interval, the
    frozen heap: harness/loadgen/run.py) is set back once all three are done."""
    reqs = _stream()
    spec = LiveServerSpec(kind="inrepo", scheduler=SCHED, model="tiny", max_model_len=MAX_LEN, ready_timeout_s=60,
                          config=ServerConfig(prefix_caching=True, time_scale=SLOW_SCALE, kv_capacity_tokens=KV_TOKENS))
    servers = tuple((f"replica {i}", dataclasses.replace(spec, port=None)) for i in range(REPLICAS))
    with contextlib.ExitStack() as stack:
        clusters = [stack.enter_context(ClusterProcesses(ClusterSpec(servers, name))) for name in TOLERANCE]
        with alone_block(), warnings.catch_warnings(), ThreadPoolExecutor(len(clusters)) as pool:
            warnings.simplefilter("ignore")  # dispatch-lag warnings on a shared 2-core machine (once: not per thread)
            switch = sys.getswitchinterval()
            try:
                runs = list(pool.map(lambda cluster: _measured_run(reqs, cluster.endpoint), clusters))
            finally:  # the last run to end would restore what an earlier one had set
                sys.setswitchinterval(switch)
                gc.unfreeze()
    return reqs, dict(zip(TOLERANCE, runs))


def _measured_run(reqs, endpoint):
    """The stream through a fleet's router, and what its replicas' counters say of it."""
    before = scrape(endpoint.base_url)
    res = run_live_result(reqs, endpoint, OPTS)
    return res, measured(before, scrape(endpoint.base_url))


@pytest.fixture(scope="module", params=list(TOLERANCE))
def fleet_run(request, fleet_runs):
    reqs, runs = fleet_runs
    return (request.param, reqs, *runs[request.param])


def test_live_hit_rates_match_the_simulated_ones(fleet_run):
    name, reqs, res, counted = fleet_run
    assert all(r.completed for r in res.records), [r.error for r in res.records if r.error][:3]
    sim_records, sim_rate, _ = _simulated(reqs, name)
    live_rate = counted["hit_rate"]  # the replicas' own counters, summed by the router's /metrics
    assert live_rate > 0.5, live_rate
    assert abs(live_rate - sim_rate) <= TOLERANCE[name], f"{name}: live {live_rate:.4f} vs simulated {sim_rate:.4f}"
    # and the requests' usage says what the counters say (first admissions only; no preemption here)
    live_usage, sim_usage = cache_summary(res.records, 16), cache_summary(sim_records, 16)
    assert abs(live_usage.token_hit_rate - sim_usage.token_hit_rate) <= TOLERANCE[name]
    print(f"{name}: live {live_rate:.4f} simulated {sim_rate:.4f}")


def test_affinity_puts_each_turn_where_the_simulator_does(fleet_run):
    name, reqs, res, _ = fleet_run
    if name != "session_affinity":
        pytest.skip("placement is timing-free only under session affinity")
    sim_records, _, _ = _simulated(reqs, name)
    # same replica, same cache: each request found what the simulator's found (a block's worth of
    # slack: a live answer's tokens are the server's own, its blocks register as the simulator's do)
    same = sum(abs(a.cached_tokens - b.cached_tokens) <= 16 for a, b in zip(res.records, sim_records))
    assert same >= 0.95 * len(reqs), f"{same} of {len(reqs)} requests found what the simulator found"
