"""Sessions live (loopback): the load generator releases a turn when the answer before it ended
(+ think time) and sends the ids the server generated back in the next prompt; the in-repo server
with a prefix cache reports what it found (usage and /metrics), and its real-time twin agrees with
the simulator within the bounds of tests/test_live_loopback.py."""
from __future__ import annotations

import numpy as np
import pytest

from engines.perf import Deployment, PerfModel
from engines.schedulers import EngineConfig, SchedulerConfig, make_engine
from engines.server.config import ServerConfig
from harness.backends.live import LiveServerSpec, serve
from harness.backends.live.prometheus import measured, parse_counters, scrape
from harness.backends.sim import simulate
from harness.metrics import summarize
from harness.workload import load_workload, requests_at_rate
from tests.test_live_loopback import KV_TOKENS, MAX_LEN, _run, assert_in_band_unless_disturbed
from tests.test_sim_sessions import cache_summary

# Cached prompts make short prefills: iterations stretched further than test_live_loopback's
# SLOW_SCALE keep a P50 TTFT of ~150 ms, so that HTTP and timer wake-ups stay a few percent of it.
SLOW_SCALE = 60.0

SCHED = SchedulerConfig("sarathi", max_num_seqs=128, token_budget=512)  # with prefix caching, the engine's
SESSIONS = {"kind": "agent", "system_prompts": 2, "system_prompt_tokens": 200, "turns": {"mean": 4},
            "first_user_tokens": {"median": 60, "p90": 200}, "user_tokens": {"median": 40, "p90": 120},
            "output_tokens": {"median": 15, "p90": 40}, "think_time_s": 0.2}


@pytest.fixture(scope="module")
def session_run():
    reqs = requests_at_rate(load_workload({"name": "t", "max_total_tokens": MAX_LEN, "sessions": SESSIONS}, 80, 3),
                            {"name": "poisson"}, 4.0, 3)
    spec = LiveServerSpec(kind="inrepo", scheduler=SCHED, model="tiny", max_model_len=MAX_LEN, ready_timeout_s=60,
                          config=ServerConfig(prefix_caching=True, time_scale=SLOW_SCALE, kv_capacity_tokens=KV_TOKENS))
    with serve(spec) as ep:
        before = scrape(ep.base_url)
        res = _run(reqs, ep)
        counted = measured(before, scrape(ep.base_url))
    return reqs, res, counted


@pytest.mark.live
def test_turns_are_released_by_the_answer_before_them(session_run):
    reqs, res, _ = session_run
    by_id = {r.request_id: r for r in res.records}
    assert all(r.completed for r in res.records), [r.error for r in res.records if r.error][:3]
    later = [q for q in reqs if q.after is not None]
    assert later
    for q in later:  # released think_s after the previous answer's last token (plus the stream's end)
        gap = by_id[q.request_id].arrival_s - by_id[q.after].finished_s
        assert q.think_s <= gap <= q.think_s + 0.05


@pytest.mark.live
def test_the_server_found_what_the_simulator_finds(session_run):
    reqs, res, counted = session_run
    live = cache_summary(res.records, 16)
    sim_records = simulate(reqs, make_engine(EngineConfig(SCHED, KV_TOKENS, MAX_LEN, prefix_caching=True)), _Scaled())
    sim = cache_summary(sim_records, 16)
    # every later turn found at least the conversation so far up to its last full block: echoed answers hit
    assert live.token_hit_rate > 0.5 and abs(live.token_hit_rate - sim.token_hit_rate) <= 0.01
    # the server's own counters say the same as the responses' usage (first admissions: no preemption
    # here), beside the client's 4-token warm-up stream, which no cache can hold
    prompt = sum(r.prompt_len for r in res.records)
    assert counted["queries"] == prompt + 4 and counted["hits"] == sum(r.cached_tokens for r in res.records)
    assert_in_band_unless_disturbed(res, summarize(res.records), summarize(sim_records))


class _Scaled:  # the simulator priced like the server's twin
    perf = PerfModel(Deployment.create(model="tiny", gpu="a100-80g-sxm", tp=1))

    def batch_times(self, new_tokens, context_lens):
        return self.perf.batch_times(new_tokens, context_lens) * SLOW_SCALE


def test_counters_parse_both_servers_names():
    text = ('# HELP x\nengine:prefix_cache_queries_total{model_name="m"} 100.0\n'
            'engine:prefix_cache_hits_total{model_name="m"} 40\n'
            'vllm:prefix_cache_queries_total{engine="0",model_name="m"} 10\nvllm:prefix_cache_hits_total 5\n'
            'vllm:prefix_cache_hits_created 7\n')
    assert parse_counters(text) == {"prefix_cache_queries_total": 110.0, "prefix_cache_hits_total": 45.0}
    assert parse_counters("engine:kv_blocks_used 3\n") is None
    assert np.isclose(measured(parse_counters(text), {"prefix_cache_queries_total": 210.0,
                                                      "prefix_cache_hits_total": 95.0})["hit_rate"], 0.5)
