"""Colocated instances of different deployments (issue 17 item 1: "each its own deployment"):
`cluster.replicas` groups, each its own GPU and TP/PP; every instance is exactly a single-engine run
of the requests routed to it on its own deployment; the GPUs and the layout are saved; bad input."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from engines.routers import make_router
from engines.schedulers import EngineConfig, make_engine
from harness.backends import open_backend
from harness.backends.sim import simulate, simulate_cluster
from harness.config import compose
from harness.config import plan_experiment
from harness.search.probe import probe_requests
from tests.cli import ROOT, assert_refused
from tests.test_sim_cluster import same

SMALL = ["experiment=yi34b_tp2_strict", "scheduler=[sarathi]", "search.num_requests=96"]
MIXED = "cluster.replicas=[{count:2},{count:1,gpu:h100-80g-sxm,tp:1}]"


def test_each_instance_runs_on_its_own_deployment():
    plan = plan_experiment(compose([*SMALL, MIXED, "cluster.router=least_outstanding"]))
    (n0, a100), (n1, h100) = plan.replicas
    assert (n0, a100.gpu, a100.tp, n1, h100.gpu, h100.tp) == (2, "a100-80g-pcie", 2, 1, "h100-80g-sxm", 1)
    assert h100.kv_capacity_tokens != a100.kv_capacity_tokens
    plans = [a100, a100, h100]
    job = plan.job("sarathi", progress=False)
    reqs = probe_requests(plan, 3.0)
    run = open_backend(job).run(reqs)
    assert run.diagnostics["instance_requests"][2] > 0
    choices: list[int] = []
    engines = [make_engine(EngineConfig(job.scheduler, p.kv_capacity_tokens, job.max_model_len, p.block_size)) for p in plans]
    again = simulate_cluster(reqs, engines, [p.timer for p in plans], make_router("least_outstanding"),
                             pp=[p.pp for p in plans], on_route=lambda s, k: choices.append(k))
    order = sorted(range(len(reqs)), key=lambda i: (reqs[i].arrival_s, i))
    where = {order[rank]: k for rank, k in enumerate(choices)}
    for k, p in enumerate(plans):
        mine = [i for i in range(len(reqs)) if where[i] == k]
        alone = simulate([reqs[i] for i in mine], make_engine(EngineConfig(job.scheduler, p.kv_capacity_tokens, job.max_model_len,
                                                               p.block_size)), p.timer)
        for i, b in zip(mine, alone, strict=True):
            same(run.records[i], b)
            same(again[i], b)


def test_one_group_of_one_is_that_deployment_alone():
    plan = plan_experiment(compose([*SMALL, "cluster.replicas=[{gpu:h100-80g-sxm,tp:1}]"]))
    ((n, h100),) = plan.replicas
    reqs = probe_requests(plan, 1.0)
    run = open_backend(plan.job("sarathi", progress=False)).run(reqs)
    alone = simulate(reqs, make_engine(EngineConfig(plan.schedulers["sarathi"], h100.kv_capacity_tokens, plan.max_model_len,
                                       h100.block_size)), h100.timer)
    for a, b in zip(run.records, alone, strict=True):
        same(a, b)


def test_a_mixed_run_saves_its_gpus_and_layout(tmp_path):
    from harness.analysis.loader import load_results
    p = subprocess.run([sys.executable, "-m", "harness", *SMALL, MIXED, f"results_dir={tmp_path}", "search.fixed_qps=2",
                        "search.num_requests=48"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "2x a100-80g-pcie tp2 + 1x h100-80g-sxm tp1 behind round_robin" in p.stdout
    (summary,) = tmp_path.glob("*/*/summary.json")
    saved = json.loads(summary.read_text())
    assert saved["num_gpus"] == 5 and saved["cluster"]["replicas"][1]["gpu"] == "h100-80g-sxm"
    runs, _ = load_results(tmp_path)
    assert runs[["num_gpus", "layout"]].to_dict("records") == [{"num_gpus": 5, "layout": saved["cluster"]["layout"]}]


@pytest.mark.parametrize("args,message", [
    (["cluster.replicas=[{count:0}]"], "cluster: replicas: count must be >= 1, got 0"),
    (["cluster.replicas=[{cnt:2}]"], "cluster.replicas: unknown key 'cnt'"),
    ([MIXED, "cluster.instances=2"], "leave instances=1"),
    ([MIXED, "cluster.prefill_instances=1", "cluster.decode_instances=1"], "leave instances=1 and no prefill/decode"),
    (["cluster.replicas=[{gpu:a40,tp:1}]"], "cluster.replicas[0]: yi-34b on 1x a40"),
    (["cluster.replicas=[{gpu:tpu-v9}]"], "unknown GPU 'tpu-v9'"),
    ([MIXED, "backend=live"], "only backend=sim runs them so far"),
])
def test_bad_replicas_one_line_exit_2_nothing_written(tmp_path, args, message):
    assert_refused(tmp_path, [*SMALL, *args], message)
