"""Everything a server process is started with, as one frozen value. Its command-line flags are
derived from the fields (`add_flags`, `from_flags`), and a client that starts a server turns a
config back into flags with `server_flags`: one list of knobs and defaults, never restated."""
from __future__ import annotations

import argparse
import typing
from dataclasses import MISSING, dataclass, field, fields

from engines.core.block_manager import DEFAULT_BLOCK_SIZE
from engines.perf import DEFAULT_GPU_MEMORY_UTILIZATION
from engines.perf.links import get_link
from engines.perf.kernels import DEFAULT_STACK
from engines.perf.transfer import TRANSFER_MODES
from engines.schedulers import ROLES, EngineConfig, SchedulerConfig, policy_names, policy_spec
from engines.schedulers.registry import Knob

EXECUTORS = ("realtime", "null", "torch")
API_KEY_ENV = "ENGINES_SERVER_API_KEY"  # the key from the environment (not visible in `ps`), as vLLM's VLLM_API_KEY


def _help(text: str, **more) -> dict:
    return {"help": text, **more}


@dataclass(frozen=True)
class ServerConfig:
    model: str = field(default="tiny", metadata=_help("engines.perf model name (realtime, null) or a model path (torch)"))
    served_model_name: str | None = field(default=None, metadata=_help("name clients send as 'model' (default: --model)"))
    host: str = field(default="127.0.0.1", metadata=_help("loopback unless told otherwise: a benchmark server is not a service"))
    port: int = field(default=8000, metadata=_help("0 picks a free port"))
    scheduler: SchedulerConfig = field(default_factory=lambda: SchedulerConfig("sarathi"))  # flags: --policy and its knobs
    max_model_len: int | None = field(default=None, metadata=_help("default: the model's max_position_embeddings"))
    executor: str = field(default="realtime", metadata=_help("realtime: the perf model in real time; null: zero time; torch", choices=EXECUTORS))
    gpu: str = field(default="a100-80g-sxm", metadata=_help("the performance model's GPU (realtime)"))
    tp: int = 1
    stack: str = field(default=DEFAULT_STACK, metadata=_help("the performance model's engine kernels (realtime; engines/perf/kernels.py)"))
    attention_kernel: str | None = field(default=None, metadata=_help("another attention kernel than the stack's (realtime)"))
    weight_dtype: str | None = field(default=None, metadata=_help("fp8: the performance model's FP8 weights (realtime; H100/H200)"))
    kv_dtype: str | None = field(default=None, metadata=_help("fp8: the performance model's FP8 KV cache (realtime; H100/H200)"))
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION
    kv_capacity_tokens: int | None = field(default=None, metadata=_help("default: the performance model's KV arithmetic"))
    block_size: int = DEFAULT_BLOCK_SIZE
    prefix_caching: bool = field(default=False, metadata=_help("automatic prefix caching: true or false (engines/core/prefix_cache.py)"))
    time_scale: float = field(default=1.0, metadata=_help("realtime executor: stretch every predicted iteration"))
    seed: int = 0
    # The torch executor's speed paths (docs/torch-engine.md).
    attention_backend: str = field(default="auto", metadata=_help(
        "torch executor: auto | flashinfer | flash_attn | flex | sdpa | reference (each self-checked before serving)"))
    cuda_graphs: bool = field(default=False, metadata=_help(
        "torch executor: decode and short-chunk steps through CUDA graphs (needs --attention-backend flex)"))
    compile_elementwise: bool = field(default=False, metadata=_help(
        "torch executor: torch.compile the norm (+ residual add), rotary and SiLU-gate functions"))
    # Disaggregated prefill/decode (engines/server/handoff.py): a router sends each request to a
    # prefill server, then to a decode server with what the prefill server reported.
    role: str = field(default="both", metadata=_help(
        "both: whole requests; prefill: end each request at its first token (max_tokens=1) and report "
        "kv_transfer_params; decode: also take requests prefilled elsewhere (kv_transfer_params)", choices=ROLES))
    kv_link: str | None = field(default=None, metadata=_help(
        "decode role: the link a prompt's KV arrives over (an engines.perf.hardware link), or one per prefill "
        "server, comma-separated, picked by kv_transfer_params.source; required with the realtime executor"))
    kv_transfer_lanes: int = field(default=1, metadata=_help(
        "decode role: GPUs that send the KV in parallel, min(prefill GPUs, decode GPUs) (engines/perf/transfer.py)"))
    kv_transfer: str = field(default="after_prefill", metadata=_help(
        "decode role: when the KV moves (engines/perf/transfer.py)", choices=TRANSFER_MODES))
    max_body_bytes: int = field(default=4 << 20, metadata=_help("4 MiB: a 16k-token prompt as a JSON id list is ~100 KB"))
    shutdown_grace_s: float = field(default=5.0, metadata=_help("on SIGTERM, how long running requests may finish"))
    body_timeout_s: float = field(default=30.0, metadata=_help("a request body not received by then: 408 (slow senders)"))
    tokenizer: str | None = field(default=None, metadata=_help(
        "a tokenizer.json (or a directory holding one) for text prompts; default: the model directory's, else one token per word"))
    api_key: str | None = field(default=None, repr=False, metadata=_help(
        f"require 'Authorization: Bearer KEY' on /v1/* (default: ${API_KEY_ENV}); /health and /metrics stay open"))

    def __post_init__(self) -> None:
        if self.executor not in EXECUTORS:
            raise ValueError(f"unknown executor {self.executor!r}; known: {', '.join(EXECUTORS)}")
        if not 0 <= self.port < 65536:
            raise ValueError(f"port must be in [0, 65535], got {self.port}")
        if not self.time_scale > 0:
            raise ValueError(f"time_scale must be > 0, got {self.time_scale}")
        if not self.body_timeout_s > 0:
            raise ValueError(f"body_timeout_s must be > 0, got {self.body_timeout_s}")
        if self.max_body_bytes < 1024:
            raise ValueError(f"max_body_bytes must be >= 1024, got {self.max_body_bytes}")
        self._check_role()

    def _check_role(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"unknown role {self.role!r}; known: {', '.join(ROLES)}")
        if self.kv_transfer not in TRANSFER_MODES:
            raise ValueError(f"unknown kv_transfer {self.kv_transfer!r}; known: {', '.join(TRANSFER_MODES)}")
        if self.kv_transfer_lanes < 1:
            raise ValueError(f"kv_transfer_lanes must be >= 1, got {self.kv_transfer_lanes}")
        if self.role == "decode" and self.executor == "torch":
            raise ValueError("role decode with executor torch: each prompt's KV would have to move from the prefill "
                             "server's GPU, which this server cannot do; use --executor realtime (the twin prices "
                             "the transfer) or null")
        if self.role == "decode" and self.executor == "realtime" and not self.kv_link:
            raise ValueError("role decode with executor realtime needs --kv-link (the link the KV arrives over, "
                             "to price its transfer)")
        for name in self.kv_links:
            try:
                get_link(name)
            except Exception as e:
                raise ValueError(f"kv_link: {e}") from None

    @property
    def kv_links(self) -> tuple[str, ...]:
        """The link from each prefill server (one name: from every one)."""
        return tuple(n.strip() for n in self.kv_link.split(",")) if self.kv_link else ()

    @property
    def name(self) -> str:
        return self.served_model_name or self.model

    @property
    def policy(self) -> str:
        return self.scheduler.policy

    def engine_config(self, kv_capacity_tokens: int, max_model_len: int) -> EngineConfig:
        """The engine this server runs, over the KV cache and context its executor has."""
        return EngineConfig(self.scheduler, kv_capacity_tokens, max_model_len, self.block_size, role=self.role,
                            prefix_caching=self.prefix_caching)


# Help of the built-in policies' knobs; every registered policy's knobs get a flag (one flag per
# knob name: a name means the same thing in every policy that has it).
_KNOB_HELP = {
    "max_num_seqs": "most sequences running at once",
    "token_budget": "tokens per iteration, decodes included",
    # vLLM's --max-num-batched-tokens in both of vLLM's policies: the tokens of one step. V0 (`vllm`)
    # runs prefill steps of whole prompts and decode steps apart, so only its prefill steps can reach it
    # (V0 requires it >= max_num_seqs); V1 (`vllm_v1`) mixes them, so every step counts its decodes too.
    "max_num_batched_tokens": "tokens of one step, vLLM's flag (vllm: a prefill step's whole prompts, default max "
                              "model len; vllm_v1: decodes and prefill chunks together)",
    "chunk_size": "prefill tokens of the one chunk an iteration (decodes ride on top)",
    "tile_tokens": "cut the chunk so chunk + decodes fills whole tiles of this many tokens (0: no cut)",
}


def _boolean(text: str) -> bool:
    """A flag's true/false (argparse's type=bool would read 'False' as true)."""
    value = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}.get(text.strip().lower())
    if value is None:
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return value


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _scalar(owner, f) -> type:
    hint = typing.get_type_hints(owner)[f.name]
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if args else hint


def _policy_knobs() -> dict[str, tuple[Knob, list[str]]]:
    """Every registered policy's knobs by name, with the policies that have each."""
    out: dict[str, tuple[Knob, list[str]]] = {}
    for name in policy_names():
        for k in policy_spec(name).knobs:
            out.setdefault(k.name, (k, []))[1].append(name)
    return out


def add_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per field (`--max-num-seqs` for max_num_seqs), typed and defaulted by the field;
    `--policy` and one flag per knob of the registered policies (default: the policy's own)."""
    for f in fields(ServerConfig):
        if f.name == "scheduler":
            continue
        default = f.default if f.default is not MISSING else None
        kind = _scalar(ServerConfig, f)
        parser.add_argument(_flag(f.name), type=_boolean if kind is bool else kind, default=default,
                            choices=f.metadata.get("choices"), help=f.metadata.get("help"), dest=f.name)
    parser.add_argument("--policy", default=ServerConfig().scheduler.policy, choices=policy_names(),
                        help="scheduling policy (engines/schedulers; plugins: the sarathi_harness.policies entry points)")
    for name, (knob, owners) in _policy_knobs().items():
        what = _KNOB_HELP.get(name, name.replace("_", " "))
        parser.add_argument(_flag(name), type=_boolean if knob.kind is bool else knob.kind, default=None, dest=name,
                            help=f"{what} ({', '.join(owners)}; default: the policy's)")


def from_flags(args: argparse.Namespace) -> ServerConfig:
    """The config the parsed flags describe (ValueError names a bad value, or a knob the policy lacks)."""
    values = vars(args)
    spec = policy_spec(values["policy"])
    given = {k: values[k] for k in _policy_knobs() if values.get(k) is not None}
    stray = [k for k in given if k not in spec.knob_names]
    if stray:
        raise ValueError(f"{_flag(stray[0])}: policy {spec.name} has no such knob; its knobs: "
                         f"{', '.join(_flag(k) for k in spec.knob_names) or 'none'}")
    scheduler = SchedulerConfig(spec.name, **given)
    return ServerConfig(scheduler=scheduler, **{f.name: values[f.name] for f in fields(ServerConfig) if f.name != "scheduler"})


def server_flags(cfg: ServerConfig) -> list[str]:
    """The command-line flags that give back `cfg` (fields left at None are omitted)."""
    out: list[str] = []
    for f in fields(ServerConfig):
        value = getattr(cfg, f.name)
        if f.name == "scheduler":
            out += ["--policy", cfg.scheduler.policy]
            out += [w for k, v in cfg.scheduler.knobs if v is not None for w in (_flag(k), _word(v))]
        elif value is not None:
            out += [_flag(f.name), _word(value)]
    return out


def _word(value) -> str:
    return repr(value) if isinstance(value, float) else str(value)
