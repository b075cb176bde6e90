"""One count of a deployment's GPUs: the summary's `num_gpus` (goodput per GPU divides by it), the
loader's count of a run saved without it, and DeploymentPlan.gpus (what the launcher starts) all
count TP x PP x DP per instance, DP ranks included."""
from __future__ import annotations

import json

import yaml

from harness.analysis.loader import load_runs
from harness.commands.run import num_gpus
from harness.config import compose, plan_experiment

WORDS = ["experiment=mistral7b_strict", "hardware=h100_80g", "scheduler=[vllm_v1]", "perf.stack=vllm-0.32",
         "slo.tbt_s=0.1"]


def test_summary_counts_dp_ranks_as_the_deployment_does() -> None:
    """parallel=dp2_ep on an MoE model: 2 ranks of one GPU each are 2 GPUs (it said 1)."""
    plan = plan_experiment(compose([*WORDS, "model=qwen3-30b-a3b", "parallel=dp2_ep"]))
    assert plan.deployment.dp == 2
    assert num_gpus(plan) == plan.deployment.gpus == 2


def test_dense_and_cluster_counts_unchanged() -> None:
    """No DP ranks: tp x pp per instance, times the instances, as before."""
    tp2 = plan_experiment(compose([*WORDS, "parallel=tp2"]))
    assert num_gpus(tp2) == tp2.deployment.gpus == 2
    fleet = plan_experiment(compose([*WORDS, "parallel=tp2", "cluster.instances=3"]))
    assert num_gpus(fleet) == 6


def test_loader_counts_dp_ranks_of_a_run_saved_without_num_gpus(tmp_path) -> None:
    """A summary from before `num_gpus` was saved: the loader counts tp x pp x dp x instances."""
    run = tmp_path / "exp" / "20260101-000000"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump(
        {"model": {"name": "qwen3-30b-a3b"}, "hardware": {"gpu": "h100_80g"},
         "parallel": {"tp": 2, "pp": 1, "dp": 2, "ep": True}, "cluster": {"instances": 1}}))
    (run / "summary.json").write_text(json.dumps(
        {"experiment": "exp", "schedulers": {"vllm_v1": {"config": {}, "capacity_qps": 1.0, "probes": []}}}))
    assert load_runs(tmp_path)["num_gpus"].tolist() == [4]
