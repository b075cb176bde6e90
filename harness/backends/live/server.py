"""Servers the live backend starts: what to launch (`LiveServerSpec`), and where it answers once up
(`Endpoint`).

    from harness.backends.live import LiveServerSpec, run_live_result, serve
    spec = LiveServerSpec(kind="inrepo", scheduler=SchedulerConfig("sarathi"), model="tiny", max_model_len=4096)
    records = run_live_result(requests, spec).records  # starts the server, runs, stops it

    with serve(spec) as endpoint:                 # one server for many probes (a capacity search)
        for qps in ...:
            records = run_live_result(requests_at(qps), endpoint).records

Server kinds: `inrepo` (`python -m engines.server`, executor realtime | null | torch) and `vllm`
(`vllm serve`, flags from engines/external/vllm.py, command from config so vLLM lives in its own
venv). Records have the simulator's schema; see harness/loadgen/run.py for what each time means
live (first_scheduled_s is NaN for vLLM: it does not report it).

Requests without prompt token ids get seeded random non-special ids from the served model's
vocabulary (harness.workload.with_prompt_token_ids): no two prompts share a prefix block.
"""
from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from common.errors import HarnessError
from engines.schedulers import SchedulerConfig
from engines.server.config import API_KEY_ENV, ServerConfig, server_flags
from harness.backends.live.lifecycle import LaunchSpec, ServerProcess, free_port
from harness.paths import ROOT as REPO_ROOT
from harness.settings.live import SERVER_KINDS, LiveSettings

_SERVER = ServerConfig()  # the in-repo server's defaults


@dataclass(frozen=True)
class Endpoint:
    """A server that is up: where it is and what it serves."""

    base_url: str
    model: str  # the name clients send
    vocab_size: int
    special_ids: tuple[int, ...] = (0, 1, 2)
    max_model_len: int | None = None
    api_key: str | None = field(default=None, repr=False)  # sent as `Authorization: Bearer KEY`
    api: str = "completions"  # completions | chat (harness/loadgen/options.py)


@dataclass(frozen=True)
class LiveServerSpec:
    kind: str  # inrepo | vllm
    scheduler: SchedulerConfig
    model: str  # inrepo: engines.perf catalog name (or a model dir for torch); vllm: model dir or name
    max_model_len: int
    host: str = LiveSettings.host
    port: int | None = None  # None: a free port
    served_model_name: str | None = None
    seed: int = 0
    # The in-repo server's knobs (executor, gpu, tp, stack, KV pool, torch paths, role, ...), its defaults
    # its own; its model, scheduler, name, host, port and seed are the spec's. vLLM reads prefix_caching.
    config: ServerConfig = _SERVER
    # vLLM
    vllm_command: tuple[str, ...] = ()
    vllm_env: tuple[tuple[str, str], ...] = ()
    vllm_extra_args: tuple[str, ...] = ()
    vllm_scheduler: str = "native"  # VLLM_SCHEDULERS (the live backend says plugin unless told otherwise)
    vllm_trace: str | None = None  # plugin: where it writes its iteration trace (None: no trace)
    api_key: str | None = field(default=None, repr=False)  # the server requires it; the client sends it
    # lifecycle
    ready_timeout_s: float = LiveSettings.ready_timeout_s
    stop_timeout_s: float = LiveSettings.stop_timeout_s
    log_dir: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in SERVER_KINDS:
            raise HarnessError(f"backend.server must be one of {', '.join(SERVER_KINDS)}, got {self.kind!r}")
        c = self.config
        torch_paths = (c.attention_backend, c.cuda_graphs, c.compile_elementwise)
        if torch_paths != (_SERVER.attention_backend, _SERVER.cuda_graphs, _SERVER.compile_elementwise) and (
                self.kind != "inrepo" or c.executor != "torch"):
            raise HarnessError("backend.torch (attention_backend, cuda_graphs, compile_elementwise) sets the in-repo "
                               f"server's torch executor; this server is {self.kind} with executor {c.executor}")
        if c.cuda_graphs and c.attention_backend != "flex":
            raise HarnessError("backend.torch.cuda_graphs=true needs backend.torch.attention_backend=flex "
                               f"(the graphs' attention), got {c.attention_backend!r}")

    @property
    def name(self) -> str:
        return self.served_model_name or (Path(self.model).name if Path(self.model).is_dir() else self.model)

    def command(self, port: int) -> list[str]:
        if self.kind == "vllm":
            from engines.external.vllm import UnsupportedPolicy, serve_command

            try:
                return serve_command(self.vllm_command, self.model, scheduler=self.scheduler,
                                     max_model_len=self.max_model_len, prefix_caching=self.config.prefix_caching,
                                     host=self.host, port=port, served_model_name=self.name, seed=self.seed,
                                     extra_args=self.vllm_extra_args, plugin=self.vllm_scheduler == "plugin")
            except (UnsupportedPolicy, ValueError) as e:
                raise HarnessError(str(e)) from None
        return [sys.executable, "-m", "engines.server", *server_flags(self.server_config(port))]

    def server_config(self, port: int) -> ServerConfig:
        """The in-repo server's config; the API key goes by environment (launch), never a flag."""
        return server_knobs(self.config, model=self.model, scheduler=self.scheduler, max_model_len=self.max_model_len,
                            host=self.host, port=port, seed=self.seed, served_model_name=self.name)

    def launch(self) -> tuple[LaunchSpec, Endpoint]:
        port = self.port or free_port(self.host)
        base_url = f"http://{self.host}:{port}"
        if self.kind == "vllm":
            from engines.external.vllm import DEFAULT_ENV

            env = {**DEFAULT_ENV, **dict(self.vllm_env)}
            if self.vllm_scheduler == "plugin":  # vLLM's process imports the policy from this repository
                from engines.external.vllm_scheduler import plugin_env

                env.update(plugin_env(self.scheduler, self.vllm_trace), PYTHONPATH=str(REPO_ROOT))
            key_env = "VLLM_API_KEY"  # vLLM's own spelling of --api-key
        else:
            env = {"PYTHONPATH": str(REPO_ROOT)}
            key_env = API_KEY_ENV
        if self.api_key:
            env[key_env] = self.api_key  # by environment: a command line is visible to every user
        role = "" if self.config.role == "both" else f"{self.config.role}-"
        name = f"server-{self.kind}-{self.scheduler.policy}-{role}{port}.log"
        log = None if self.log_dir is None else str(Path(self.log_dir) / name)
        vocab, specials = model_vocabulary(self.model)
        launch = LaunchSpec(command=self.command(port), base_url=base_url, model=self.name, env=env, cwd=str(REPO_ROOT),
                            ready_timeout_s=self.ready_timeout_s, stop_timeout_s=self.stop_timeout_s, log_path=log,
                            api_key=self.api_key,
                            warmup_max_tokens=1 if self.config.role == "prefill" else LaunchSpec.warmup_max_tokens)
        return launch, Endpoint(base_url, self.name, vocab, specials, self.max_model_len, self.api_key)


def server_knobs(base: ServerConfig = _SERVER, **knobs) -> ServerConfig:
    """`base` with `knobs` changed; a bad knob is the user's error, told in one line."""
    try:
        return replace(base, **knobs)
    except ValueError as e:
        raise HarnessError(f"backend: {e}") from None


def model_vocabulary(model: str) -> tuple[int, tuple[int, ...]]:
    """(vocab size, special ids) from a model directory's config.json, else the perf catalog."""
    cfg_path = Path(model) / "config.json"
    if cfg_path.exists():
        cfg = json.loads(cfg_path.read_text())
        specials = set()
        for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
            v = cfg.get(key)
            specials.update(v if isinstance(v, list) else [v] if isinstance(v, int) else [])
        tok_cfg = Path(model) / "tokenizer_config.json"
        if tok_cfg.exists():  # added special tokens (<unk>, ...) sit at ids listed here
            decoder = json.loads(tok_cfg.read_text()).get("added_tokens_decoder") or {}
            specials.update(int(k) for k in decoder)
        return int(cfg["vocab_size"]), tuple(sorted(specials))
    from engines.perf import get_model

    try:
        return get_model(model).vocab_size, (0, 1, 2)
    except Exception as e:
        raise HarnessError(f"model {model!r}: neither a model directory with config.json nor a catalog model ({e})") from None


@contextmanager
def serve(spec: LiveServerSpec) -> Iterator[Endpoint]:
    """Start the server, yield its endpoint once healthy and warmed up, stop its process group."""
    launch, endpoint = spec.launch()
    with ServerProcess(launch):
        yield endpoint
