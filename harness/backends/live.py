"""The live backend: a real server process driven over HTTP by the load generator.

    spec = LiveServerSpec(kind="inrepo", scheduler=SchedulerConfig("sarathi"), model="tiny", max_model_len=4096)
    records = run_live(requests, spec)            # starts the server, runs, stops it

    with serve(spec) as endpoint:                 # one server for many probes (a capacity search)
        for qps in ...:
            records = run_live(requests_at(qps), endpoint)

Server kinds: `inrepo` (`python -m engines.server`, executor realtime | null | torch) and `vllm`
(`vllm serve`, flags from engines/external/vllm.py, command from config so vLLM lives in its own
venv). Records have the simulator's schema; see harness/loadgen/run.py for what each time means
live (first_scheduled_s is NaN for vLLM: it does not report it).

Requests without prompt token ids get seeded random non-special ids from the served model's
vocabulary (harness.workload.with_prompt_token_ids): no two prompts share a prefix block.
"""
from __future__ import annotations

import dataclasses
import json
import sys
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from engines.schedulers import SchedulerConfig
from common.errors import HarnessError
from harness.lifecycle import LaunchSpec, ServerProcess, free_port
from harness.loadgen import LagPolicy, LoadOptions, LoadResult, run_load
from harness.records import RequestRecord, RequestSpec
from harness.workload import with_prompt_token_ids

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVER_KINDS = ("inrepo", "vllm")


@dataclass(frozen=True)
class Endpoint:
    """A server that is up: where it is and what it serves."""

    base_url: str
    model: str  # the name clients send
    vocab_size: int
    special_ids: tuple[int, ...] = (0, 1, 2)
    max_model_len: int | None = None


@dataclass(frozen=True)
class LiveServerSpec:
    kind: str  # inrepo | vllm
    scheduler: SchedulerConfig
    model: str  # inrepo: engines.perf catalog name (or a model dir for torch); vllm: model dir or name
    max_model_len: int
    host: str = "127.0.0.1"
    port: int | None = None  # None: a free port
    served_model_name: str | None = None
    seed: int = 0
    # in-repo server
    executor: str = "realtime"
    gpu: str = "a100-80g"
    tp: int = 1
    time_scale: float = 1.0
    kv_capacity_tokens: int | None = None
    gpu_memory_utilization: float = 0.9
    block_size: int = 16
    # vLLM
    vllm_command: tuple[str, ...] = ()
    vllm_env: tuple[tuple[str, str], ...] = ()
    vllm_extra_args: tuple[str, ...] = ()
    # lifecycle
    ready_timeout_s: float = 180.0
    stop_timeout_s: float = 15.0
    log_dir: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in SERVER_KINDS:
            raise HarnessError(f"backend.server must be one of {', '.join(SERVER_KINDS)}, got {self.kind!r}")

    @property
    def name(self) -> str:
        return self.served_model_name or (Path(self.model).name if Path(self.model).is_dir() else self.model)

    def command(self, port: int) -> list[str]:
        if self.kind == "vllm":
            from engines.external.vllm import UnsupportedPolicy, serve_command

            try:
                return serve_command(
                    self.vllm_command, self.model, scheduler=self.scheduler, max_model_len=self.max_model_len,
                    host=self.host, port=port, served_model_name=self.name, seed=self.seed,
                    extra_args=self.vllm_extra_args,
                )
            except (UnsupportedPolicy, ValueError) as e:
                raise HarnessError(str(e)) from None
        s = self.scheduler
        cmd = [
            sys.executable, "-m", "engines.server",
            "--host", self.host, "--port", str(port), "--model", self.model, "--served-model-name", self.name,
            "--policy", s.policy, "--token-budget", str(s.token_budget), "--max-num-seqs", str(s.max_num_seqs),
            "--max-model-len", str(self.max_model_len), "--executor", self.executor, "--gpu", self.gpu,
            "--tp", str(self.tp), "--time-scale", repr(self.time_scale),
            "--gpu-memory-utilization", repr(self.gpu_memory_utilization), "--block-size", str(self.block_size),
            "--seed", str(self.seed),
        ]
        if s.max_num_batched_tokens is not None:
            cmd += ["--max-num-batched-tokens", str(s.max_num_batched_tokens)]
        if self.kv_capacity_tokens is not None:
            cmd += ["--kv-capacity-tokens", str(self.kv_capacity_tokens)]
        return cmd

    def launch(self) -> tuple[LaunchSpec, Endpoint]:
        port = self.port or free_port(self.host)
        base_url = f"http://{self.host}:{port}"
        if self.kind == "vllm":
            from engines.external.vllm import DEFAULT_ENV

            env = {**DEFAULT_ENV, **dict(self.vllm_env)}
        else:
            env = {"PYTHONPATH": str(REPO_ROOT)}
        log = None
        if self.log_dir is not None:
            log = str(Path(self.log_dir) / f"server-{self.kind}-{self.scheduler.policy}-{port}.log")
        vocab, specials = model_vocabulary(self.model)
        launch = LaunchSpec(
            command=self.command(port), base_url=base_url, model=self.name, env=env, cwd=str(REPO_ROOT),
            ready_timeout_s=self.ready_timeout_s, stop_timeout_s=self.stop_timeout_s, log_path=log,
        )
        return launch, Endpoint(base_url, self.name, vocab, specials, self.max_model_len)


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


@dataclass(frozen=True)
class LiveRunOptions:
    seed: int = 0  # prompt token ids
    time_limit_s: float | None = None
    concurrency: int | None = None
    request_timeout_s: float = 600.0
    lag: LagPolicy = field(default_factory=LagPolicy)
    strict: bool = True  # an invalid dispatch verdict raises instead of returning suspect records
    progress: bool = True
    progress_desc: str = "requests"
    realtime_priority: bool = False  # client threads under SCHED_FIFO (see harness/loadgen/options.py)


def run_live_result(requests: Sequence[RequestSpec], server: Endpoint | LiveServerSpec,
                    options: LiveRunOptions = LiveRunOptions()) -> LoadResult:
    if isinstance(server, LiveServerSpec):
        with serve(server) as endpoint:
            return run_live_result(requests, endpoint, options)
    if any(r.prompt_token_ids is None for r in requests):
        requests = with_prompt_token_ids(requests, server.vocab_size, options.seed, server.special_ids)
    result = run_load(requests, LoadOptions(
        base_url=server.base_url, model=server.model, request_timeout_s=options.request_timeout_s,
        time_limit_s=options.time_limit_s, concurrency=options.concurrency, lag=options.lag,
        progress=options.progress, progress_desc=options.progress_desc, realtime_priority=options.realtime_priority,
    ))
    verdict = result.verdict
    if verdict.status == "invalid" and options.strict:
        raise HarnessError(f"live run invalid: {verdict.message}")
    if verdict.status != "ok":
        warnings.warn(f"live run: {verdict.message}", stacklevel=2)
    return result


def run_live(requests: Sequence[RequestSpec], server: Endpoint | LiveServerSpec,
             options: LiveRunOptions = LiveRunOptions()) -> list[RequestRecord]:
    """One probe: `requests` against a running `Endpoint`, or against a server started for it."""
    return run_live_result(requests, server, options).records


def spec_from_config(backend: Mapping, scheduler: SchedulerConfig, *, model: str, gpu: str, tp: int,
                     max_model_len: int, seed: int) -> LiveServerSpec:
    """From experiments/backend/live.yaml (plus the experiment's model, hardware, parallel)."""
    vllm = backend.get("vllm") or {}
    kind = str(backend.get("server", "inrepo"))
    if kind == "vllm":
        model = vllm.get("model_path") or model
        if not vllm.get("command"):
            raise HarnessError("backend.vllm.command is empty: say how to run vLLM (e.g. HARNESS_VLLM_PYTHON)")
    return LiveServerSpec(
        kind=kind, scheduler=scheduler, model=str(model), max_model_len=int(max_model_len),
        host=str(backend.get("host", "127.0.0.1")), port=backend.get("port"),
        served_model_name=vllm.get("served_model_name") if kind == "vllm" else None, seed=int(seed),
        executor=str(backend.get("executor", "realtime")), gpu=str(gpu), tp=int(tp),
        time_scale=float(backend.get("time_scale", 1.0)),
        kv_capacity_tokens=backend.get("kv_capacity_tokens"),
        gpu_memory_utilization=float(backend.get("gpu_memory_utilization", 0.9)),
        block_size=int(backend.get("block_size", 16)),
        vllm_command=tuple(str(c) for c in vllm.get("command") or ()),
        vllm_env=tuple((str(k), str(v)) for k, v in (vllm.get("env") or {}).items()),
        vllm_extra_args=tuple(str(a) for a in vllm.get("extra_args") or ()),
        ready_timeout_s=float(backend.get("ready_timeout_s", 180.0)),
        stop_timeout_s=float(backend.get("stop_timeout_s", 15.0)),
        log_dir=backend.get("log_dir"),
    )


def run_options_from_config(backend: Mapping, *, seed: int, time_limit_s: float | None,
                            concurrency: int | None, progress: bool) -> LiveRunOptions:
    lag = backend.get("lag") or {}
    return LiveRunOptions(
        seed=seed, time_limit_s=time_limit_s, concurrency=concurrency,
        request_timeout_s=float(backend.get("request_timeout_s", 600.0)),
        lag=LagPolicy(float(lag.get("quantile", 0.99)), float(lag.get("warn_s", 0.001)), float(lag.get("invalid_s", 0.010))),
        strict=bool(backend.get("strict", True)), progress=progress,
        realtime_priority=bool(backend.get("client_realtime_priority", False)),
    )


# -- capacity search against one live server ---------------------------------------------------
# The experiment layer (harness/experiment.py) plans a run for both backends; these helpers are
# the live counterparts of its run_probe / search_capacity. One server per scheduler serves every
# probe of that scheduler's search (a vLLM start costs about a minute); probes run back to back,
# each after the previous one's requests have all finished or been aborted.

def plan_server_spec(plan, scheduler: str, cfg: Mapping) -> LiveServerSpec:
    """The server for `scheduler` of an ExperimentPlan, from the composed config (`cfg.backend`,
    `cfg.model`, `cfg.hardware`, `cfg.parallel`)."""
    pp = int(cfg["parallel"].get("pp", 1))
    if pp != 1 and str(cfg["backend"].get("server", "inrepo")) == "inrepo":
        raise HarnessError(f"backend=live with the in-repo server runs pp=1 only, got pp={pp}")
    spec = spec_from_config(
        cfg["backend"], plan.schedulers[scheduler], model=str(cfg["model"]["name"]), gpu=str(cfg["hardware"]["gpu"]),
        tp=int(cfg["parallel"]["tp"]), max_model_len=plan.max_model_len, seed=plan.seed,
    )
    if spec.kind == "inrepo" and spec.executor != "torch" and spec.kv_capacity_tokens is None:
        # The twin gets exactly the simulator's KV pool, so both backends make the same decisions.
        spec = dataclasses.replace(spec, kv_capacity_tokens=int(plan.deployment.kv_capacity_tokens))
    return spec


def run_live_probe(plan, scheduler: str, qps: float, endpoint: Endpoint, cfg: Mapping):
    """One probe at `qps` against a running server: an experiment.ProbeOutcome, like run_probe's."""
    from harness.experiment import probe_outcome, probe_requests
    from harness.workload import concurrency_limit

    requests = probe_requests(plan, qps)
    options = run_options_from_config(
        cfg["backend"], seed=plan.seed, time_limit_s=plan.search.time_limit_s,
        concurrency=concurrency_limit(plan.arrival), progress=bool(cfg.get("progress", True)),
    )
    options = dataclasses.replace(options, progress_desc=f"{scheduler} @ {qps:.3g} QPS")
    return probe_outcome(plan, scheduler, qps, run_live(requests, endpoint, options))


def search_capacity_live(plan, scheduler: str, cfg: Mapping, on_probe=None):
    """The capacity search for one scheduler against one live server it starts and stops.
    No probe cache: live probes are measurements, not reproducible bit for bit."""
    from harness.experiment import search_capacity

    with serve(plan_server_spec(plan, scheduler, cfg)) as endpoint:
        return search_capacity(
            plan, scheduler, on_probe=on_probe, run=lambda qps: run_live_probe(plan, scheduler, qps, endpoint, cfg)
        )
