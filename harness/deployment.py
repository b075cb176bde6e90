"""The simulated deployment: a model on GPUs with TP/PP, priced by the performance model."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from engines.perf import Deployment, PerfModel
from engines.perf.profile import build_perf_model
from common.errors import HarnessError


@dataclass(frozen=True)
class SimDeployment:
    model_name: str
    description: str
    perf: PerfModel
    timer: object  # batch_times(new_tokens, context_lens) -> seconds of one stage; pp_send_time(tokens)
    pp: int
    kv_capacity_tokens: int
    block_size: int


def build_deployment(
    model: Mapping, hardware: Mapping, parallel: Mapping, backend: Mapping, max_model_len: int, perf_cfg: Mapping | None = None
) -> SimDeployment:
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
    )
    perf = build_perf_model(deployment, perf_cfg)
    util = float(backend.get("gpu_memory_utilization", 0.9))
    kv_tokens = perf.kv_capacity_tokens(util)
    if kv_tokens < max_model_len:
        raise HarnessError(
            f"{model['name']} on {tp * pp}x {hardware['gpu']} (tp={tp}, pp={pp}) leaves KV room for "
            f"{max(kv_tokens, 0)} tokens at gpu_memory_utilization={util}: not one sequence of {max_model_len}"
        )
    desc = f"{model['name']} on {tp * pp}x {hardware['gpu']} (tp={tp}, pp={pp})"
    profile = getattr(perf, "profile", None)
    if profile is not None:
        desc += f", measured profile {profile.digest[:12]}"
    return SimDeployment(str(model["name"]), desc, perf, perf, pp, kv_tokens, int(backend.get("block_size", 16)))
