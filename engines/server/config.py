"""Everything a server process is started with, as one frozen value (the CLI fills it)."""
from __future__ import annotations

from dataclasses import dataclass

EXECUTORS = ("realtime", "null", "torch")


@dataclass(frozen=True)
class ServerConfig:
    model: str = "tiny"  # engines.perf catalog name (realtime, null) or a model path (torch)
    served_model_name: str | None = None  # the name clients send; default: `model`
    host: str = "127.0.0.1"  # loopback unless told otherwise: a benchmark server is not a service
    port: int = 8000
    policy: str = "sarathi"
    token_budget: int = 512
    max_num_seqs: int = 128
    max_num_batched_tokens: int | None = None
    max_model_len: int | None = None  # default: the model's max_position_embeddings
    executor: str = "realtime"
    gpu: str = "a100-80g"
    tp: int = 1
    gpu_memory_utilization: float = 0.9
    kv_capacity_tokens: int | None = None  # default: the performance model's KV arithmetic
    block_size: int = 16
    time_scale: float = 1.0  # realtime executor: stretch every predicted iteration by this factor
    seed: int = 0
    max_body_bytes: int = 4 << 20  # 4 MiB: a 16k-token prompt as a JSON id list is ~100 KB
    shutdown_grace_s: float = 5.0  # on SIGTERM, how long running requests may finish

    def __post_init__(self) -> None:
        if self.executor not in EXECUTORS:
            raise ValueError(f"unknown executor {self.executor!r}; known: {', '.join(EXECUTORS)}")
        if not 0 <= self.port < 65536:
            raise ValueError(f"port must be in [0, 65535], got {self.port}")
        if not self.time_scale > 0:
            raise ValueError(f"time_scale must be > 0, got {self.time_scale}")
        if self.max_body_bytes < 1024:
            raise ValueError(f"max_body_bytes must be >= 1024, got {self.max_body_bytes}")

    @property
    def name(self) -> str:
        return self.served_model_name or self.model
