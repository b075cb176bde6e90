"""The planner on this machine's CPU (`hardware=cpu`, engines/perf/cpu_device.py): a device with no
catalog GPU, placed on the node build_deployment gives it (harness.backends.deployment.CPU_TOPOLOGY).
It was refused as "unknown GPU 'cpu'" before any deployment was tried."""
from __future__ import annotations

import dataclasses

import pytest

from common.errors import HarnessError
from engines.perf import Deployment
from engines.perf.cpu_device import cpu_spec
from engines.perf.hardware import get_topology
from harness.config import compose, experiment_config
from harness.planner.settings import PlanSettings
from harness.planner.space import enumerate_space
from tests.cli import assert_refused

# Given numbers, not a probe of this host: the plan must not measure the machine it runs on.
CPU = ["model=mistral-7b", "hardware=cpu", "hardware.cpu_flops=1e12", "hardware.cpu_bandwidth=1e11",
       "dataset=openchat_sharegpt4", "slo.tbt_s=1"]


def test_a_cpu_plan_plans_its_deployment() -> None:
    settings = PlanSettings(tp=[1], pp=[1], workers=1, grid={"vllm": {"max_num_seqs": [64]}})
    space = enumerate_space(experiment_config(compose([*CPU, "perf.stack=vllm-0.32", "hardware.cpu_memory_bytes=68719476736"])), settings)
    (plan,) = space.plans.values()
    assert space.gpus_per_node == 1 and plan.deployment.gpu == "cpu" and plan.deployment.kv_capacity_tokens >= 8192


def test_a_cpu_too_small_says_why_not_unknown_gpu(tmp_path) -> None:
    """8 GiB holds no mistral-7b: the line says so (it said "unknown GPU 'cpu'")."""
    assert_refused(tmp_path, ["plan", *CPU, "perf.stack=vllm-0.32", "hardware.cpu_memory_bytes=8589934592", "plan.tp=[1]", "plan.pp=[1]"],
                   "mistral-7b fits on no deployment of up to 2x cpu (mistral-7b on 1x cpu (tp=1, pp=1) leaves KV room")


@pytest.mark.parametrize("stack", ["vllm-0.32", "vllm-0.19"])
def test_a_cpu_run_with_a_shipped_stack_is_priced(stack) -> None:
    """hardware=cpu with a shipped vLLM stack (vLLM's CPU build): priced, not a KeyError."""
    from harness.config import plan_experiment
    plan = plan_experiment(compose([*CPU, "hardware.cpu_memory_bytes=68719476736", f"release={stack}",
                                    "scheduler=[vllm_v1]"]))
    assert plan.deployment.perf.deployment.stack == stack and plan.deployment.kv_capacity_tokens > 0


def test_a_cpu_deployment_without_a_named_node_is_priced_on_the_cpus_own() -> None:
    """`Deployment.create(cpu_spec, stack=...)` with no topology took the GPU catalog's default node
    and raised KeyError 'cpu'; the CPU device's node is a single device with no link priced."""
    spec = cpu_spec(1e12, 1e11, 64 << 30)
    assert get_topology(None, spec).name == get_topology("pcie-only").name
    Deployment.create(gpu=spec, stack="vllm-0.32")  # raised KeyError 'cpu' before


def test_a_device_with_no_default_node_is_one_clear_error() -> None:
    odd = dataclasses.replace(cpu_spec(1e12, 1e11), name="tpu-v9")
    with pytest.raises(HarnessError, match="no default node for 'tpu-v9': name a topology"):
        get_topology(None, odd)
