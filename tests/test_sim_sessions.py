"""Sessions in the simulator: turns released by answers (+ think time), the prefix cache's hits,
and fast-forward still exact with a cache (against plain stepping, every policy, pipelines too)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engines.schedulers import EngineConfig, SchedulerConfig, make_engine
from harness.backends.sim import simulate
from harness.workload import load_workload, requests_at_rate
from tests.policy_workloads import ALL_POLICIES
from tests.test_sim import HalfStageTimer, WindowedTimer

MAX_LEN = 512


def _engine(policy, kv, caching=True, max_seqs=8):
    # each policy's own budget knob (orca and fastertransformer have none)
    cfg = SchedulerConfig.shared(policy, max_num_seqs=max_seqs, token_budget=128,
                                 max_num_batched_tokens=MAX_LEN)
    return make_engine(EngineConfig(cfg, kv, MAX_LEN, prefix_caching=caching))


def _sessions(n, seed, *, heads=2, turns=None, think=0.5, answers="echo", kind="conversation"):
    sessions = {"kind": kind, "turns": turns or {"mean": 4}, "first_user_tokens": {"median": 40, "p90": 120},
                "user_tokens": {"median": 20, "p90": 60}, "output_tokens": {"median": 20, "p90": 60},
                "think_time_s": think, "answers": answers, "system_prompts": heads, "system_prompt_tokens": 64}
    return load_workload({"name": "t", "max_total_tokens": MAX_LEN, "sessions": sessions}, n, seed)


def _same(a, b):
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x.token_times_s, y.token_times_s)
        assert (x.arrival_s, x.first_scheduled_s, x.finished_s, x.num_preemptions, x.cached_tokens, x.error) == \
            (y.arrival_s, y.first_scheduled_s, y.finished_s, y.num_preemptions, y.cached_tokens, y.error)


def test_a_turn_is_released_think_time_after_the_answer_before_it():
    w = _sessions(60, 1)
    reqs = requests_at_rate(w, {"name": "poisson"}, 5.0, 1)
    recs = simulate(reqs, _engine("sarathi", 8192), WindowedTimer())
    by_id = {r.request_id: r for r in recs}
    later = [q for q in reqs if q.after is not None]
    assert later and all(r.completed for r in recs)
    for q in later:  # bit for bit: released at the finish plus the think time
        assert by_id[q.request_id].arrival_s == by_id[q.after].finished_s + q.think_s
        assert by_id[q.request_id].first_scheduled_s >= by_id[q.request_id].arrival_s
    assert all(by_id[q.request_id].arrival_s == q.arrival_s for q in reqs if q.after is None)
    # the conversation so far was cached: every later turn found at least its head's 4 blocks
    assert all(by_id[q.request_id].cached_tokens >= 64 for q in later)


def test_without_the_cache_nothing_is_cached_and_the_answers_identity_matters():
    w = _sessions(60, 2)
    reqs = requests_at_rate(w, {"name": "poisson"}, 5.0, 2)
    assert all(r.cached_tokens == 0 for r in simulate(reqs, _engine("sarathi", 8192, caching=False), WindowedTimer()))
    echo = sum(r.cached_tokens for r in simulate(reqs, _engine("sarathi", 8192), WindowedTimer()))
    other = requests_at_rate(_sessions(60, 2, answers="dataset"), {"name": "poisson"}, 5.0, 2)
    fresh = sum(r.cached_tokens for r in simulate(other, _engine("sarathi", 8192), WindowedTimer()))
    assert echo > fresh > 0  # a generated answer the next turn does not carry can only hit its prompt's blocks


def test_a_time_limit_reports_unreleased_turns_as_not_started():
    w = _sessions(80, 3, think=50.0)
    reqs = requests_at_rate(w, {"name": "poisson"}, 50.0, 3)
    recs = simulate(reqs, _engine("sarathi", 8192), WindowedTimer(), time_limit_s=20.0)
    assert [r.request_id for r in recs] == [q.request_id for q in reqs]
    never = [r for r, q in zip(recs, reqs) if q.after is not None and np.isnan(r.first_scheduled_s)]
    assert never and all(r.error == "unfinished at time limit" and not r.started for r in never)


@settings(max_examples=30, deadline=None)
@given(policy=st.sampled_from(ALL_POLICIES), kv_blocks=st.sampled_from([40, 80, 400]), rate=st.floats(0.5, 50.0),
       seed=st.integers(0, 1000), think=st.sampled_from([0.0, 0.05, 1.0]), heads=st.integers(0, 3))
def test_fast_forward_equals_plain_stepping_with_a_cache(policy, kv_blocks, rate, seed, think, heads):
    kv = kv_blocks * 16 if policy not in ("orca", "fastertransformer") else max(kv_blocks * 16, 4 * MAX_LEN)
    reqs = requests_at_rate(_sessions(40, seed, heads=heads, think=think), {"name": "poisson"}, rate, seed)
    plain = simulate(reqs, _engine(policy, kv), WindowedTimer(), fast_forward=False)
    fast = simulate(reqs, _engine(policy, kv), WindowedTimer(), fast_forward=True)
    _same(plain, fast)


@pytest.mark.parametrize("policy", ["sarathi", "vllm", "orca"])
def test_pipelines_step_sessions_and_match_themselves(policy):
    reqs = requests_at_rate(_sessions(40, 4), {"name": "poisson"}, 10.0, 4)
    a = simulate(reqs, _engine(policy, 4096), HalfStageTimer(), pp=2, fast_forward=True)
    b = simulate(reqs, _engine(policy, 4096), HalfStageTimer(), pp=2, fast_forward=False)
    _same(a, b)
    assert all(r.completed for r in a) and sum(r.cached_tokens for r in a) > 0


def test_open_loop_requests_with_a_cache_fast_forward_exactly():
    w = load_workload({"name": "t", "max_total_tokens": MAX_LEN, "sessions": {
        "kind": "shared_prefix", "base": "openchat_sharegpt4", "system_prompts": 3, "system_prompt_tokens": [32, 64, 100]}},
        60, 5)
    reqs = requests_at_rate(w, {"name": "poisson"}, 20.0, 5)
    assert all(q.after is None for q in reqs)
    plain = simulate(reqs, _engine("sarathi", 2048), WindowedTimer(), fast_forward=False)
    fast = simulate(reqs, _engine("sarathi", 2048), WindowedTimer(), fast_forward=True)
    _same(plain, fast)
    assert sum(r.cached_tokens > 0 for r in fast) > 30


@pytest.mark.parametrize("policy", ["sarathi", "vllm", "orca"])
def test_a_pipeline_with_a_cache_steps_plainly(policy):
    """The replay takes a group's blocks when it hands back, which would reorder takes and
    evictions; with a prefix cache the pipeline steps (the same records as fast_forward=False)."""
    w = load_workload({"name": "t", "max_total_tokens": MAX_LEN, "sessions": {
        "kind": "shared_prefix", "base": "openchat_sharegpt4", "system_prompts": 2, "system_prompt_tokens": [48, 96]}},
        80, 6)
    reqs = requests_at_rate(w, {"name": "poisson"}, 30.0, 6)
    kv = 1024 if policy != "orca" else 4 * MAX_LEN
    stats: dict = {}
    _same(simulate(reqs, _engine(policy, kv), HalfStageTimer(), pp=2, fast_forward=False),
          simulate(reqs, _engine(policy, kv), HalfStageTimer(), pp=2, fast_forward=True, stats=stats))
    assert stats.get("replayed_launches", 0) == 0


def cache_summary(records, block_size: int):
    """harness.metrics.summarize_cache of a probe's records (the product reads it from saved rows)."""
    from harness.metrics import summarize_cache

    return summarize_cache([r.prompt_len for r in records], [r.cached_tokens for r in records],
                           [r.first_token_s - r.arrival_s for r in records], [r.started for r in records], block_size)


def test_the_cache_summary_splits_ttft_by_hit_and_miss():
    reqs = requests_at_rate(_sessions(60, 7), {"name": "poisson"}, 5.0, 7)
    recs = simulate(reqs, _engine("sarathi", 8192), WindowedTimer())
    c = cache_summary(recs, 16)
    hits = [r for r in recs if r.cached_tokens]
    assert c.hit_requests == len(hits) and c.miss_requests == len(recs) - len(hits)
    assert c.token_hit_rate == sum(r.cached_tokens for r in recs) / sum(r.prompt_len for r in recs)
    assert c.block_hit_rate == sum(r.cached_tokens // 16 for r in recs) / sum((r.prompt_len - 1) // 16 for r in recs)
    assert c.ttft_hit.count == len(hits) and c.ttft_hit.p50 < c.ttft_miss.p50  # a hit skips most of its prefill


def test_the_iteration_log_shows_what_the_cache_saved():
    from harness.backends.sim.iterations import IterationLog

    w = load_workload({"name": "t", "max_total_tokens": MAX_LEN, "sessions": {
        "kind": "shared_prefix", "base": "openchat_sharegpt4", "system_prompts": 2, "system_prompt_tokens": [64, 128]}},
        60, 8)
    reqs = requests_at_rate(w, {"name": "poisson"}, 20.0, 8)
    engine = _engine("sarathi", 4096)
    log = IterationLog(WindowedTimer(), len(reqs))
    log.cache = engine.blocks.stats
    recs = simulate(reqs, engine, WindowedTimer(), log=log, concurrency=8)  # an offline closed loop keeps the cache too
    saved = log.columns()["cached_tokens"]
    assert saved.sum() == engine.blocks.stats.hits == sum(r.cached_tokens for r in recs) > 0
