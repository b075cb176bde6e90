"""`backend`: the fields every backend's settings have; each backend declares its own subclass
(`Backend.settings`, the schema of experiments/backend/<name>.yaml) and the door picks it by `name`."""
from __future__ import annotations

from dataclasses import dataclass

from engines.core.block_manager import DEFAULT_BLOCK_SIZE
from engines.perf import DEFAULT_GPU_MEMORY_UTILIZATION


@dataclass(frozen=True)
class BackendSettings:
    """Fields every backend has (the planner reads the last two to size the KV pool)."""

    name: str = "sim"
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION
    block_size: int = DEFAULT_BLOCK_SIZE

    @property
    def runs_model_on_gpus(self) -> bool:
        """Whether the servers this backend starts run the model on GPUs (what a job asks a cluster for)."""
        return False

    @property
    def start_s(self) -> float:
        """The most a server start may take (one per scheduler), for a job's time limit."""
        return 0.0
