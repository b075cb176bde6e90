"""Conversations against a real vLLM (CPU build) with `--enable-prefix-caching`, through the
harness's launcher and load generator: every turn completes, each next turn carries the ids vLLM
generated (return_token_ids), and the hit rate vLLM measured (usage.prompt_tokens_details and its
Prometheus counters) is reported beside the simulator's for the same requests.

Needs HARNESS_VLLM_PYTHON (see tests/test_vllm_live.py); skipped otherwise.
"""
from __future__ import annotations

import warnings

import pytest

from engines.schedulers import EngineConfig, SchedulerConfig, make_engine
from harness.backends.base import BackendJob
from engines.server.config import ServerConfig
from harness.backends.live import LiveServerSpec, serve
from harness.loadgen import LoadOptions
from harness.backends.live.client import run_live_result
from harness.backends.live.prometheus import measured, scrape
from harness.backends.sim import simulate
from harness.workload import load_workload, requests_at_rate
from tests.test_sim import WindowedTimer
from tests.test_vllm_live import MAX_MODEL_LEN, VLLM_PYTHON, model_dir, pytestmark  # noqa: F401
from tests.test_sim_sessions import cache_summary

CPU_BLOCK = 128
SESSIONS = {"kind": "conversation", "turns": {"mean": 4}, "first_user_tokens": {"median": 80, "p90": 300},
            "user_tokens": {"median": 30, "p90": 100}, "output_tokens": {"median": 24, "p90": 60},
            "think_time_s": 0.1, "system_prompts": 2, "system_prompt_tokens": 128}


def test_a_conversation_workload_runs_end_to_end_and_its_hit_rate_is_measured(model_dir, tmp_path):
    sched = SchedulerConfig("sarathi", max_num_seqs=32, token_budget=256)
    reqs = requests_at_rate(load_workload({"name": "c", "max_total_tokens": MAX_MODEL_LEN, "sessions": SESSIONS}, 40, 5),
                            {"name": "poisson"}, 2.0, 5)
    spec = LiveServerSpec(
        kind="vllm", scheduler=sched, model=model_dir, served_model_name="tiny", max_model_len=MAX_MODEL_LEN,
        config=ServerConfig(prefix_caching=True),
        vllm_command=(VLLM_PYTHON, "-m", "vllm.entrypoints.openai.api_server"),
        vllm_extra_args=("--enforce-eager",), ready_timeout_s=240, log_dir=str(tmp_path),
    )
    with serve(spec) as endpoint, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        before = scrape(endpoint.base_url)
        res = run_live_result(reqs, endpoint, LoadOptions(progress=False, strict=False))
        counted = measured(before, scrape(endpoint.base_url))
    assert all(r.completed for r in res.records), [r.error for r in res.records if r.error][:3]
    # vLLM's CPU platform caches in blocks of 128 tokens unless told otherwise (vllm/platforms/cpu.py);
    # the simulator is asked the same question with the same blocks
    live = cache_summary(res.records, CPU_BLOCK)
    sim_engine = make_engine(EngineConfig(sched, 1 << 16, MAX_MODEL_LEN, block_size=CPU_BLOCK, prefix_caching=True))
    sim = cache_summary(simulate(reqs, sim_engine, WindowedTimer()), CPU_BLOCK)
    print(f"\nmeasured hit rate {live.token_hit_rate:.3f} (vLLM's counters: {counted}), simulated {sim.token_hit_rate:.3f}")
    # vLLM found every later turn's conversation so far (its answers echoed): as the simulator does,
    # up to requests of one system prompt admitted in the same step (neither finds the other's blocks)
    assert live.token_hit_rate > 0.5 and abs(live.token_hit_rate - sim.token_hit_rate) <= 0.02
    assert counted is not None and counted["hits"] >= sum(r.cached_tokens for r in res.records)
