"""The deployment a backend serves: a model on GPUs with TP/PP, priced by the performance model.

Planned once from the config; the simulator prices iterations with `timer`, the live backend
starts servers for `model_name` on `gpu` with `tp` and gives its twin the same KV pool.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from common.errors import HarnessError
from engines.perf import Deployment, PerfModel
from engines.perf.factory import build_perf_model


@dataclass(frozen=True)
class DeploymentPlan:
    model_name: str
    gpu: str
    tp: int
    pp: int
    description: str
    perf: PerfModel
    timer: object  # batch_times(new_tokens, context_lens) -> seconds of one stage; pp_send_time(tokens)
    kv_capacity_tokens: int
    block_size: int


def _kernel_choice(perf_cfg: Mapping | None) -> dict:
    """perf.stack / perf.attention_kernel / perf.kv_memory, where the config names them
    (engines.perf.kernels, engines.perf.memory)."""
    cfg = perf_cfg or {}
    return {k: str(cfg[k]) for k in ("stack", "attention_kernel", "kv_memory") if cfg.get(k) is not None}


def build_deployment(
    model: Mapping, hardware: Mapping, parallel: Mapping, *, gpu_memory_utilization: float, block_size: int,
    max_model_len: int, perf_cfg: Mapping | None = None,
) -> DeploymentPlan:
    tp, pp = int(parallel["tp"]), int(parallel["pp"])
    if tp < 1 or pp < 1:
        raise HarnessError(f"parallel: tp and pp must be >= 1, got tp={tp} pp={pp}")
    deployment = Deployment.create(
        model=str(model["name"]),
        gpu=str(hardware["gpu"]),
        tp=tp,
        pp=pp,
        topology=hardware.get("topology"),
        gpus_per_node=hardware.get("gpus_per_node"),
        **_kernel_choice(perf_cfg),
    )
    perf = build_perf_model(deployment, perf_cfg)
    kv_tokens = perf.kv_capacity_tokens(gpu_memory_utilization, int(block_size))
    if kv_tokens < max_model_len:
        raise HarnessError(
            f"{model['name']} on {tp * pp}x {hardware['gpu']} (tp={tp}, pp={pp}) leaves KV room for "
            f"{max(kv_tokens, 0)} tokens at gpu_memory_utilization={gpu_memory_utilization}: not one sequence of {max_model_len}"
        )
    desc = f"{model['name']} on {tp * pp}x {hardware['gpu']} (tp={tp}, pp={pp})"
    profile = getattr(perf, "profile", None)
    if profile is not None:
        desc += f", measured profile {profile.digest[:12]}"
    return DeploymentPlan(str(model["name"]), str(hardware["gpu"]), tp, pp, desc, perf, perf, kv_tokens, int(block_size))
