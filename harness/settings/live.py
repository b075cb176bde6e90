"""`backend=live`: servers the harness starts (harness.backends.live), the schema of
experiments/backend/live.yaml."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from common.errors import HarnessError
from engines.server.config import ServerConfig
from harness.settings.client import ClientSettings

SERVER_KINDS = ("inrepo", "vllm")
VLLM_SCHEDULERS = ("plugin", "native")  # the policy inside vLLM (--scheduler-cls) | vLLM's own, flags mapped


@dataclass(frozen=True)
class VllmSettings:
    """How to run `vllm serve` (it lives in its own venv: scripts/setup_vllm_cpu.sh)."""

    command: list[str] = field(default_factory=list)  # e.g. [python, -m, vllm.entrypoints.openai.api_server]
    model_path: str | None = None  # a local model dir; None: model.name (a hub id)
    served_model_name: str | None = None
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TorchSettings:
    """The torch executor's speed paths (executor=torch only; docs/torch-engine.md), passed to the
    in-repo server as its --attention-backend / --cuda-graphs / --compile-elementwise flags, whose
    defaults are these (a dataclass's field default is its class attribute)."""

    attention_backend: str = ServerConfig.attention_backend  # auto | flex | sdpa | reference | flashinfer | flash_attn
    cuda_graphs: bool = ServerConfig.cuda_graphs  # decode and mixed steps through CUDA graphs (needs flex)
    compile_elementwise: bool = ServerConfig.compile_elementwise  # torch.compile the norm, rotary and SiLU gate


@dataclass(frozen=True)
class LiveSettings(ClientSettings):
    """The schema of experiments/backend/live.yaml."""

    RETIRED_KEYS: ClassVar[tuple[str, ...]] = ("fast_forward",)  # in live configs saved before it left

    name: str = "live"
    server: str = "inrepo"  # inrepo: python -m engines.server | vllm: vllm serve
    # server=vllm: plugin (the policy itself runs inside vLLM: --scheduler-cls, engines/external/vllm_scheduler,
    # with its iteration trace) | native (vLLM's own scheduler, flags mapped from the policy: engines/external/vllm.py)
    vllm_scheduler: str = "plugin"
    executor: str = "realtime"  # inrepo: realtime (perf model in real time) | null (zero time) | torch
    time_scale: float = 1.0  # realtime: stretch every predicted iteration (slow hosts; executors/realtime.py)
    host: str = "127.0.0.1"  # servers bind loopback only unless told otherwise
    port: int | None = None  # None: a free port per server
    kv_capacity_tokens: int | None = None  # inrepo: None -> the plan's KV pool (realtime, null) or measured (torch)
    ready_timeout_s: float = 180.0  # /health must answer 200 by then (vLLM on 2 CPU cores: ~60 s)
    stop_timeout_s: float = 15.0  # SIGTERM grace before the server's process group is SIGKILLed
    log_dir: str | None = None  # server logs; None: temporary files (the path is in any start error)
    api_key: str | None = field(default=None, repr=False)  # the server requires it, the client sends it
    vllm: VllmSettings = field(default_factory=VllmSettings)
    torch: TorchSettings = field(default_factory=TorchSettings)  # executor=torch: e.g. backend.torch.cuda_graphs=true

    @property
    def runs_model_on_gpus(self) -> bool:
        return self.server == "vllm" or self.executor == "torch"

    @property
    def start_s(self) -> float:
        return self.ready_timeout_s

    def __post_init__(self) -> None:
        for name, known in (("server", SERVER_KINDS), ("vllm_scheduler", VLLM_SCHEDULERS)):
            if getattr(self, name) not in known:
                raise HarnessError(f"backend.{name} must be one of {', '.join(known)}, got {getattr(self, name)!r}")
