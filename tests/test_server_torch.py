"""The server with the torch executor (real forward passes), when torch is installed."""
from __future__ import annotations

import urllib.request
import warnings

import pytest

pytest.importorskip("torch", reason="the torch executor needs torch (pip install '.[engine]')")

from engines.schedulers import SchedulerConfig  # noqa: E402
from engines.server.config import ServerConfig  # noqa: E402
from harness.backends.live import LiveServerSpec, run_live_result, serve  # noqa: E402
from harness.loadgen import LoadOptions  # noqa: E402
from harness.records import RequestSpec  # noqa: E402

pytestmark = pytest.mark.live  # starts a real server (pyproject.toml markers)


@pytest.mark.parametrize("policy", ["sarathi", "vllm"])
def test_torch_executor_serves_streams(policy):
    spec = LiveServerSpec(kind="inrepo", scheduler=SchedulerConfig.shared(policy, max_num_seqs=8, token_budget=64),
                          model="tiny-llama", max_model_len=512, ready_timeout_s=120,
                          config=ServerConfig(executor="torch", kv_capacity_tokens=8192))
    reqs = [RequestSpec(i, 0.01 * i, 20 + 15 * i, 4 + i) for i in range(8)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = run_live_result(reqs, spec, LoadOptions(progress=False, strict=False))
    assert [r.error for r in res.records] == [None] * 8
    assert all(r.completed and r.first_scheduled_s <= r.first_token_s for r in res.records)


def test_live_spec_selects_flex_and_graphs(tmp_path):
    """LiveServerSpec's torch paths reach the server process: it serves with them (CPU: the graphs'
    static buffers without capture) and names them in its start line."""
    spec = LiveServerSpec(kind="inrepo", scheduler=SchedulerConfig.shared("sarathi", max_num_seqs=3, token_budget=32),
                          model="tiny-llama", max_model_len=128, ready_timeout_s=120, log_dir=str(tmp_path),
                          config=ServerConfig(executor="torch", kv_capacity_tokens=512, attention_backend="flex",
                                              cuda_graphs=True))
    reqs = [RequestSpec(i, 0.01 * i, 12 + 9 * i, 2 + i) for i in range(4)]
    with warnings.catch_warnings(), serve(spec) as endpoint:
        warnings.simplefilter("ignore")
        res = run_live_result(reqs, endpoint, LoadOptions(progress=False, strict=False))
        with urllib.request.urlopen(f"{endpoint.base_url}/metrics", timeout=10) as r:
            metrics = dict(line.split("} ") for line in r.read().decode().splitlines() if line.startswith("engine:"))
    assert [r.error for r in res.records] == [None] * 4
    log = "".join(p.read_text() for p in tmp_path.glob("server-*.log"))
    assert "executor torch; attention flex, cuda graphs at" in log, log
    # The step paths as counters (the torch executor's metrics()): decodes through the graphs'
    # static buffers (no CUDA here), the 32-token budget's steps over the largest size (vLLM's rule
    # for 3 sequences: 1, 2, 4) eagerly; every prompt and decode token counted.
    steps = {k.split("{")[0]: float(v) for k, v in metrics.items() if k.startswith("engine:torch_step")}
    assert steps["engine:torch_steps_static_decode_total"] > 0 and steps["engine:torch_steps_eager_total"] > 0
    assert steps["engine:torch_step_tokens_total"] >= sum(r.prompt_len + r.output_len - 1 for r in reqs)
