"""scheduler=vllm_v1 makes vLLM's own decisions, step by step (issue 50, item 10).

vLLM 0.32's V1 `Scheduler` is driven in-process in the vLLM venv (scripts/vllm_scheduler_steps.py:
built as vLLM's own scheduler tests build it, synthetic requests, a fake model output of one token
per finished prefill or decode, no model) over randomized streams under KV pressure (preemption),
the long-prefill threshold, token budgets and max_num_seqs; each step's {request: tokens} and its
preemptions must be the project's policy's on the same stream (engines/schedulers/vllm_v1.py on
the harness's engine). Skipped without HARNESS_VLLM_PYTHON (scripts/setup_vllm_cpu.sh)."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from engines.core import Sequence
from engines.core.tokens import TokenIds
from engines.schedulers import EngineConfig, SchedulerConfig, make_engine

ROOT = Path(__file__).resolve().parent.parent
VLLM_PYTHON = os.environ.get("HARNESS_VLLM_PYTHON")
BLOCK = 16
STREAMS = 24  # without a prefix cache; as many again with one (prefix_stream)
FAKE_TOKEN = 7  # scripts/vllm_scheduler_steps.py: every sampled token

pytestmark = pytest.mark.skipif(not VLLM_PYTHON or not os.access(VLLM_PYTHON, os.X_OK),
                                reason="no vLLM venv: set HARNESS_VLLM_PYTHON=DIR/bin/python (scripts/setup_vllm_cpu.sh)")


def stream(seed: int) -> dict:
    """Requests of 8-300 prompt and 1-60 output tokens arriving over the first 30 steps, on a KV
    pool of 32-96 blocks (a few prompts fill it: preemption), 2-12 sequences, a 64-512 budget and,
    in half of them, a long-prefill threshold of 16-128 tokens."""
    rng = np.random.default_rng(seed)
    seqs = int(rng.integers(2, 13))
    n = int(rng.integers(8, 33))
    return {"max_num_seqs": seqs, "max_num_batched_tokens": int(rng.integers(max(64, seqs), 513)),
            "long_prefill_token_threshold": int(rng.integers(16, 129)) if seed % 2 else 0,
            "num_blocks": int(rng.integers(32, 97)), "block_size": BLOCK, "max_model_len": 512, "prefix_caching": False,
            "requests": [{"arrival_step": int(rng.integers(0, 31)), "prompt_len": int(rng.integers(8, 301)),
                          "output_len": int(rng.integers(1, 61))} for _ in range(n)]}


def prefix_stream(seed: int) -> dict:
    """`stream(seed)` with a prefix cache: each prompt one of three shared prefixes of 16-199 tokens
    and a tail of its own (1-99 tokens, at most 300 in all), on a pool no prompt mix fills (2,000
    blocks: prefix hits, hits on blocks another request fills in the same step, no eviction)."""
    spec = stream(seed) | {"prefix_caching": True, "num_blocks": 2000}
    rng = np.random.default_rng(1000 + seed)
    prefixes = [rng.integers(3, 2000, int(rng.integers(16, 200))).tolist() for _ in range(3)]
    for r in spec["requests"]:
        prompt = (prefixes[int(rng.integers(0, 3))] + rng.integers(3, 2000, int(rng.integers(1, 100))).tolist())[:300]
        r.update(prompt=prompt, prompt_len=len(prompt))
    return spec


def harness_steps(spec: dict) -> list[dict]:
    return harness_run(spec)[0]


def harness_run(spec: dict):
    """What the project's vllm_v1 policy schedules on `spec`, step by step, as the script reports
    vLLM's; and the engine it ran on."""
    sched = SchedulerConfig("vllm_v1", max_num_batched_tokens=spec["max_num_batched_tokens"],
                            max_num_seqs=spec["max_num_seqs"], release="0.32",
                            long_prefill_token_threshold=spec["long_prefill_token_threshold"])
    # vLLM's pool of num_blocks holds one fewer: its BlockPool takes the first as the null block
    # (v1/core/block_pool.py BlockPool.__init__, 0.32 l. 187).
    caching = spec["prefix_caching"]
    e = make_engine(EngineConfig(sched, (spec["num_blocks"] - 1) * BLOCK, spec["max_model_len"], BLOCK,
                                 prefix_caching=caching))
    reqs = spec["requests"]
    pending = sorted(range(len(reqs)), key=lambda i: (reqs[i]["arrival_step"], i))
    seqs, steps, step = {}, [], 0
    while pending or e.has_unfinished:
        while pending and reqs[pending[0]]["arrival_step"] <= step:
            i = pending.pop(0)
            ids = TokenIds(reqs[i]["prompt"], BLOCK) if caching else None
            seqs[i] = Sequence(i, reqs[i]["prompt_len"], reqs[i]["output_len"], tokens=ids)
            e.add(seqs[i])
        before = {i: s.num_preemptions for i, s in seqs.items()}
        batch = e.schedule()
        tokens = {} if batch is None else {str(s.seq_id): n for s, n in zip(batch.seqs, batch.new_tokens)}
        if batch is not None:
            for seq in e.complete(batch).produced:
                if caching:
                    seq.tokens.append(FAKE_TOKEN)  # what the script's fake model samples
        steps.append({"tokens": tokens, "preempted": sorted(i for i, s in seqs.items() if s.num_preemptions != before[i])})
        step += 1
    return steps, e


@pytest.fixture(scope="module")
def vllm_runs() -> tuple[list[dict], list[list[dict]]]:
    specs = [stream(seed) for seed in range(STREAMS)] + [prefix_stream(seed) for seed in range(STREAMS)]
    out = subprocess.run([VLLM_PYTHON, str(ROOT / "scripts" / "vllm_scheduler_steps.py")], input=json.dumps(specs),
                         capture_output=True, text=True, timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout)
    assert got["version"].startswith("0.32"), got["version"]
    return specs, got["runs"]


def _first_difference(ours: list[dict], theirs: list[dict]) -> str | None:
    for k, (a, b) in enumerate(zip(ours, theirs)):
        if a != b:
            return f"step {k}: vllm_v1 {a}, vLLM {b}"
    if len(ours) != len(theirs):
        return f"vllm_v1 drains in {len(ours)} steps, vLLM in {len(theirs)}"
    return None


def test_the_streams_exercise_preemption_the_long_prefill_cap_and_prefix_hits(vllm_runs):
    specs, runs = vllm_runs
    assert sum(any(s["preempted"] for s in run) for run in runs[:STREAMS]) >= STREAMS // 4
    capped = [spec["long_prefill_token_threshold"] for spec in specs]
    assert any(c and any(n == c for s in run for n in s["tokens"].values()) for c, run in zip(capped, runs))
    # prefix hits in every stream with a cache (the harness's count; the steps agree with vLLM's)
    assert all(harness_run(spec)[1].blocks.stats.hits > 0 for spec in specs[STREAMS:])


@pytest.mark.parametrize("seed", range(STREAMS))
def test_vllm_v1_schedules_what_vllm_schedules(vllm_runs, seed):
    specs, runs = vllm_runs
    assert _first_difference(harness_steps(specs[seed]), runs[seed]) is None


@pytest.mark.parametrize("seed", range(STREAMS))
def test_with_a_prefix_cache_too(vllm_runs, seed):
    specs, runs = vllm_runs
    assert _first_difference(harness_steps(specs[STREAMS + seed]), runs[STREAMS + seed]) is None
