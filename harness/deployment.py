"""The simulated deployment: a model on GPUs with TP/PP, priced by the performance model."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from engines.perf import Deployment, PerfModel
from harness.errors import HarnessError


class PipelineSerialTimer:
    """With pp > 1 but no micro-batch pipelining yet: one iteration = every stage plus the sends.

    Used until the simulator keeps several micro-batches in flight (performance-model issue);
    experiments that use it say so in their output.
    """

    def __init__(self, perf: PerfModel, pp: int) -> None:
        self.perf = perf
        self.pp = pp

    def batch_times(self, new_tokens: np.ndarray, context_lens: np.ndarray) -> np.ndarray:
        stage = self.perf.batch_times(new_tokens, context_lens)
        tokens = np.sum(new_tokens, axis=-1)
        send = np.vectorize(self.perf.pp_send_time, otypes=[float])(tokens)
        return self.pp * stage + (self.pp - 1) * send


@dataclass(frozen=True)
class SimDeployment:
    model_name: str
    description: str
    perf: PerfModel
    timer: object  # has batch_times(new_tokens, context_lens) -> seconds
    kv_capacity_tokens: int
    block_size: int
    notes: tuple[str, ...]


def build_deployment(model: Mapping, hardware: Mapping, parallel: Mapping, backend: Mapping, max_model_len: int) -> SimDeployment:
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
    perf = PerfModel(deployment)
    util = float(backend.get("gpu_memory_utilization", 0.9))
    kv_tokens = perf.kv_capacity_tokens(util)
    if kv_tokens < max_model_len:
        raise HarnessError(
            f"{model['name']} on {tp * pp}x {hardware['gpu']} (tp={tp}, pp={pp}) leaves KV room for "
            f"{max(kv_tokens, 0)} tokens at gpu_memory_utilization={util}: not one sequence of {max_model_len}"
        )
    notes = []
    timer = perf
    if pp > 1:
        timer = PipelineSerialTimer(perf, pp)
        notes.append(
            f"pp={pp}: simulated without micro-batch pipelining (each iteration runs all {pp} stages "
            "back to back); pipelined PP arrives with the performance-model issue"
        )
    desc = f"{model['name']} on {tp * pp}x {hardware['gpu']} (tp={tp}, pp={pp})"
    return SimDeployment(str(model["name"]), desc, perf, timer, kv_tokens, int(backend.get("block_size", 16)), tuple(notes))
