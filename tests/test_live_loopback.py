"""The live path end to end on loopback: load generator -> in-repo server running the real-time
twin of the performance model. What a reviewer needs to trust the live numbers:

- the client's TTFT/TBT agree with the server's own timings (delivery adds little),
- a 500-request run at a fixed rate loses nothing,
- the live twin and the simulator agree on P50 TTFT/TBT for the same workload,
- time limits, HTTP errors and refused connections are recorded per request, never dropped.
"""
from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest

from engines.perf import Deployment, PerfModel
from engines.schedulers import EngineConfig, SchedulerConfig, make_engine
from engines.server.config import ServerConfig
from harness.backends.live import Endpoint, LiveServerSpec, run_live_result, serve
from harness.loadgen import LoadOptions
from harness.backends.live.lifecycle import free_port
from harness.backends.live.twin_clock import DISTURBED, disturbed_note
from harness.backends.sim import simulate
from harness.loadgen import NOT_SENT, UNFINISHED
from harness.loadgen.pacer import realtime_permitted
from harness.metrics import summarize
from harness.records import RequestSpec

TIME_SCALE = 10.0  # iterations of tens of ms: Python's per-iteration overhead is small next to them
# For the live-vs-sim comparison, iterations ~2.5x longer still: HTTP and wake-up latencies of a
# few ms (more on a busy shared host) then stay a few percent of a P50 TTFT of ~150 ms.
SLOW_SCALE = 25.0
KV_TOKENS = 1 << 20
MAX_LEN = 4096
SCHED = SchedulerConfig("sarathi", max_num_seqs=128, token_budget=512)
OPTS = LoadOptions(progress=False, strict=False)


@pytest.fixture(scope="module")
def endpoint():
    spec = LiveServerSpec(kind="inrepo", scheduler=SCHED, model="tiny", max_model_len=MAX_LEN, ready_timeout_s=60,
                          config=ServerConfig(time_scale=TIME_SCALE, kv_capacity_tokens=KV_TOKENS))
    with serve(spec) as ep:
        yield ep


def _run(reqs, ep, opts=OPTS):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # dispatch-lag warnings on a shared 2-core machine
        return run_live_result(reqs, ep, opts)


def _poisson(n, rate, seed, prompt=(100, 800), output=(10, 80)):
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1 / rate, n))
    return [RequestSpec(i, float(t[i]), int(rng.integers(*prompt)), int(rng.integers(*output))) for i in range(n)]


@pytest.fixture(scope="module")
def twin_run(alone_block):
    """One Poisson run (same utilisation as 15 QPS at TIME_SCALE) that both the timing-agreement
    and the live-vs-sim tests read; the run, not the server's start, with the other xdist workers
    idle (tests/conftest.py)."""
    spec = LiveServerSpec(kind="inrepo", scheduler=SCHED, model="tiny", max_model_len=MAX_LEN, ready_timeout_s=60,
                          config=ServerConfig(time_scale=SLOW_SCALE, kv_capacity_tokens=KV_TOKENS))
    reqs = _poisson(100, 6.0, seed=1)
    with serve(spec) as ep, alone_block():
        return reqs, _run(reqs, ep)


@pytest.mark.live
def test_client_timings_agree_with_the_servers_own(twin_run):
    _, res = twin_run
    assert all(r.completed for r in res.records)
    st = res.server_timings
    assert all(s is not None for s in st)
    ttft_client = np.array([r.first_token_s - r.arrival_s for r in res.records])
    ttft_server = np.array([s.token_times_s[0] - r.arrival_s for s, r in zip(st, res.records)])
    tbt_client = np.concatenate([np.diff(r.token_times_s) for r in res.records])
    tbt_server = np.concatenate([np.diff(s.token_times_s) for s in st])
    # What the client adds is small: per token, it sees each token a little after the server
    # produced it (never before), and its TBTs are the server's. Delivery also holds the server's
    # own write of each event, which a busy host delays, first tokens most (measured at load 13
    # on 2 cores: per-token delay P50 1.5 ms, first-token delay P25 1.6 ms but P50 5.2 ms, the
    # server's event loop waking its new streams' handlers late): so the first token is judged
    # by its quartile, which a client that stamped late would shift as well.
    delay = np.concatenate([r.token_times_s - s.token_times_s for s, r in zip(st, res.records)])
    assert np.median(delay) <= 0.005 and np.quantile(delay, 0.01) >= -0.0005
    assert np.quantile(ttft_client - ttft_server, 0.25) <= 0.005
    assert abs(np.median(tbt_client) - np.median(tbt_server)) <= 0.005
    # The server's first-scheduled time is carried into the record.
    for r, s in zip(res.records, st):
        assert r.first_scheduled_s == s.first_scheduled_s
        assert r.dispatched_s - 0.0005 <= s.arrival_s <= r.first_scheduled_s <= r.first_token_s


@pytest.mark.live
def test_500_requests_at_a_fixed_rate_lose_nothing(endpoint):
    rng = np.random.default_rng(5)
    reqs = [RequestSpec(i, i / 100.0, int(rng.integers(16, 256)), int(rng.integers(2, 16))) for i in range(500)]
    res = _run(reqs, endpoint)
    assert len(res.records) == 500
    errors = [r.error for r in res.records if r.error]
    assert errors == []
    assert all(r.completed and len(r.token_times_s) == r.output_len for r in res.records)
    assert [r.request_id for r in res.records] == list(range(500))
    assert np.all(np.isfinite(res.dispatch_lag_s)) and res.verdict.num_sent == 500
    for r in res.records:
        assert r.arrival_s <= r.dispatched_s <= r.first_token_s <= r.finished_s == r.token_times_s[-1]
        assert np.all(np.diff(r.token_times_s) >= 0)
    # The server names each event's tokens, so the client did not ask for usage on every event.
    assert set(res.token_sources) == {"token_ids"} and res.client.continuous_usage is False
    assert res.client.peak_connections >= 1 and res.client.waited_for_connection == 0
    # Spare connections kept open: the pacer thread wrote nearly every request itself.
    assert res.client.direct_sends >= 450
    # By default the client takes realtime priority wherever the process may have it (here, as root).
    assert res.client.realtime == realtime_permitted()


@pytest.mark.live
def test_live_twin_and_simulator_agree_at_one_rate(twin_run):
    reqs, res = twin_run
    perf = PerfModel(Deployment.create(model="tiny", gpu="a100-80g-sxm", tp=1))

    class Scaled:  # the simulator priced like the server's twin
        def batch_times(self, new_tokens, context_lens):
            return perf.batch_times(new_tokens, context_lens) * SLOW_SCALE

    sim = summarize(simulate(reqs, make_engine(EngineConfig(SCHED, KV_TOKENS, MAX_LEN)), Scaled()))
    live = summarize(res.records)
    assert live.num_completed == sim.num_completed == 100
    # The twin makes the simulator's decisions with the simulator's prices; the live path only adds
    # time (HTTP, event-loop wake-ups, a shared 2-core host), so live may not beat the simulator by
    # more than clock noise, and may lose up to a fifth to the host (measured: +0..+12 % over
    # repeated runs on a busy machine). A mispriced model is caught deterministically by
    # tests/test_reference_drift.py; this test guards the live path's own overhead.
    assert_in_band_unless_disturbed(res, live, sim)


def assert_in_band_unless_disturbed(res, live, sim, low=0.95, high=1.20):
    """Live P50 TTFT and TBT within [low, high] x the simulator's, where the twin kept its timeline.

    The premise, measured: the twin's /metrics say how far it fell behind its own timeline. On a
    starved CPU it did (live P50 TTFT 1.31 s against 0.174 s at load 7-19 on 2 cores), and then the
    contract is the harness's verdict: the run is flagged as disturbed, never passed off as the model's."""
    disturbed = [n for n in res.notes if n.startswith(DISTURBED)]
    bands = [(what, lv, sm) for what, lv, sm in (("P50 TTFT", live.ttft.p50, sim.ttft.p50),
                                                 ("P50 TBT", live.tbt.p50, sim.tbt.p50))
             if not low * sm <= lv <= high * sm]
    if disturbed:
        assert len(disturbed) == 1 and "behind its own timeline" in disturbed[0], res.notes
        print(f"the host disturbed the twin, band not judged: {disturbed[0]}; outside the band: {bands}")
        return
    assert not bands, "; ".join(f"{what}: live {lv:.4f} s vs simulated {sm:.4f} s" for what, lv, sm in bands)


@pytest.mark.live
def test_time_limit_records_unfinished_and_unsent_requests(endpoint):
    reqs = [RequestSpec(i, 0.05 * i, 50, 400) for i in range(10)] + [RequestSpec(10, 5.0, 50, 5)]
    res = _run(reqs, endpoint, LoadOptions(progress=False, strict=False, time_limit_s=1.0))
    assert len(res.records) == 11
    running = res.records[:10]
    assert all(r.error == UNFINISHED for r in running)
    assert all(len(r.token_times_s) < 400 and np.isnan(r.finished_s) and np.isfinite(r.dispatched_s) for r in running)
    # Each streamed before the limit where the twin kept its timeline; a host that held it back (a flake
    # hunt at load ~4: 110 % behind) may leave a late one with no token yet, still recorded as cut, and
    # the run says the twin was disturbed.
    assert disturbed_note(res.notes) is not None or all(len(r.token_times_s) > 0 for r in running)
    assert res.records[10].error == NOT_SENT and np.isnan(res.records[10].dispatched_s)
    # Ended by its limit, not by its streams (400 tokens each, over 10 s) nor request 10's arrival at 5 s.
    assert res.wall_s < 5.0


@pytest.mark.live
def test_http_errors_are_recorded_per_request_while_the_run_goes_on(endpoint):
    reqs = [RequestSpec(0, 0.0, 50, 5), RequestSpec(1, 0.01, 4000, 500), RequestSpec(2, 0.02, 50, 5)]
    res = _run(reqs, endpoint)
    ok0, bad, ok2 = res.records
    assert ok0.completed and ok2.completed
    assert bad.error.startswith("HTTP 400") and "maximum context length" in bad.error and len(bad.token_times_s) == 0


@pytest.mark.live
def test_a_request_past_its_timeout_is_recorded_and_the_others_finish(endpoint):
    reqs = [RequestSpec(0, 0.0, 50, 3), RequestSpec(1, 0.0, 50, 2000), RequestSpec(2, 0.05, 50, 3)]
    res = _run(reqs, endpoint, LoadOptions(progress=False, strict=False, request_timeout_s=1.0))
    fast0, slow, fast2 = res.records
    assert fast0.completed and fast2.completed
    assert slow.error == "timed out after 1 s" and len(slow.token_times_s) < 2000
    # it had streamed by its timeout, unless the host held the twin back (the run says so)
    assert disturbed_note(res.notes) is not None or len(slow.token_times_s) > 0


def test_refused_connections_are_errors_not_crashes():
    ep = Endpoint(f"http://127.0.0.1:{free_port()}", "tiny", 32000)
    res = _run([RequestSpec(i, 0.01 * i, 10, 2) for i in range(5)], ep)
    assert all(r.error and "Connect" in r.error for r in res.records)


@pytest.mark.live
def test_closed_loop_keeps_the_concurrency_limit(endpoint):
    reqs = [RequestSpec(i, 0.0, 64, 6) for i in range(24)]
    res = _run(reqs, endpoint, LoadOptions(progress=False, strict=False, concurrency=4))
    assert all(r.completed for r in res.records)
    starts = np.array([r.dispatched_s for r in res.records])
    ends = np.array([r.finished_s for r in res.records])
    in_flight = [(starts <= t) & (ends > t) for t in starts]
    assert max(int(m.sum()) for m in in_flight) <= 4
    assert all(r.arrival_s <= r.dispatched_s for r in res.records)


@pytest.mark.live
def test_a_full_connection_pool_is_named_as_the_clients_own_saturation(endpoint):
    # 24 requests within 50 ms, each streaming for about a second, through 4 connections: most
    # must wait for one; the verdict blames the client, not the server.
    reqs = [RequestSpec(i, 0.002 * i, 64, 40) for i in range(24)]
    res = _run(reqs, endpoint, dataclasses.replace(OPTS, max_connections=4))
    assert [r.error for r in res.records] == [None] * 24  # waited, but nothing lost
    assert res.client.peak_connections == 4 and res.client.waited_for_connection >= 16
    assert res.verdict.status == "invalid"
    assert "waited for a connection" in res.verdict.message and "max_connections" in res.verdict.message
