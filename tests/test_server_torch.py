"""The server with the torch executor (real forward passes), when torch is installed."""
from __future__ import annotations

import warnings

import pytest

pytest.importorskip("torch", reason="the torch executor needs torch (pip install '.[engine]')")

from engines.schedulers import SchedulerConfig  # noqa: E402
from harness.backends.live import LiveRunOptions, LiveServerSpec, run_live_result  # noqa: E402
from harness.records import RequestSpec  # noqa: E402

pytestmark = pytest.mark.live  # starts a real server (pyproject.toml markers)


@pytest.mark.parametrize("policy", ["sarathi", "vllm"])
def test_torch_executor_serves_streams(policy):
    spec = LiveServerSpec(kind="inrepo", scheduler=SchedulerConfig.shared(policy, max_num_seqs=8, token_budget=64),
                          model="tiny-llama", max_model_len=512, executor="torch", kv_capacity_tokens=8192,
                          ready_timeout_s=120)
    reqs = [RequestSpec(i, 0.01 * i, 20 + 15 * i, 4 + i) for i in range(8)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = run_live_result(reqs, spec, LiveRunOptions(progress=False, strict=False))
    assert [r.error for r in res.records] == [None] * 8
    assert all(r.completed and r.first_scheduled_s <= r.first_token_s for r in res.records)
