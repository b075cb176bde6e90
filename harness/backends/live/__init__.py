"""The live backend: one real server per scheduler, started and stopped by the harness
(`server`, `lifecycle`), driven over HTTP by the load generator (`client`); a cluster (colocated
replicas, or disaggregated prefill and decode servers) behind the in-repo router (`cluster`).
Its settings are `LiveSettings`, the schema of experiments/backend/live.yaml. Not deterministic:
probes are measurements, never cached."""
from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from common.errors import HarnessError, RunBroken
from harness.backends.base import BackendJob, BackendRun
from harness.backends.deployment import DeploymentPlan
from harness.backends.live.client import measure, run_live_result
from harness.backends.live.cluster import ClusterProcesses, ClusterSpec, role_specs
from harness.backends.live.lifecycle import HealthWatch, ServerProcess
from harness.backends.live.iterations import iteration_frame, scheduler_class
from harness.backends.live.server import Endpoint, LiveServerSpec, model_vocabulary, serve, server_knobs
from harness.records import RequestSpec
from harness.settings.live import LiveSettings

__all__ = ["Backend", "ClusterSpec", "Endpoint", "LiveBackend", "LiveServerSpec", "LiveSettings", "model_vocabulary",
           "cluster_spec", "run_live_result", "scheduler_class", "serve", "server_spec"]


def server_spec(job: BackendJob, deployment: DeploymentPlan | None = None) -> LiveServerSpec:
    """The server that serves `job`: its scheduler on the planned deployment (or `deployment`)."""
    s = job.settings_as(LiveSettings)
    d = deployment or job.deployment
    if d.pp != 1 and s.server == "inrepo":
        raise HarnessError(f"backend=live with the in-repo server runs pp=1 only, got pp={d.pp}")
    model = d.model_name
    if s.server == "vllm":
        model = s.vllm.model_path or model
        if not s.vllm.command:
            raise HarnessError("backend.vllm.command is empty: say how to run vLLM (e.g. HARNESS_VLLM_PYTHON)")
    kv = s.kv_capacity_tokens
    if kv is None and s.server == "inrepo" and s.executor != "torch":
        kv = int(d.kv_capacity_tokens)  # the twin gets the simulator's KV pool: both make the same decisions
    # The settings' fields of the spec's names (host, port, timeouts, log_dir, api_key, ...); the server's
    # knobs the settings set (executor, time_scale, the torch executor's speed paths); then what the plan decides.
    same = {f.name: getattr(s, f.name) for f in dataclasses.fields(LiveServerSpec) if hasattr(s, f.name)}
    perf = d.perf.deployment
    config = server_knobs(
        executor=s.executor, time_scale=s.time_scale, **dataclasses.asdict(s.torch), gpu=d.gpu, tp=d.tp,
        stack=perf.stack, attention_kernel=perf.attention_kernel, weight_dtype=perf.weight_dtype, kv_dtype=perf.kv_dtype,
        kv_capacity_tokens=kv, prefix_caching=job.prefix_caching)
    return LiveServerSpec(**{
        **same, "kind": s.server, "scheduler": job.scheduler, "model": str(model), "max_model_len": int(job.max_model_len),
        "seed": int(job.seed), "served_model_name": s.vllm.served_model_name if s.server == "vllm" else None,
        "config": config, "vllm_command": tuple(s.vllm.command), "vllm_env": tuple(s.vllm.env.items()),
        "vllm_extra_args": tuple(s.vllm.extra_args)})


def cluster_spec(job: BackendJob) -> ClusterSpec | None:
    """The servers and router of a cluster job (harness/backends/live/cluster.py); None for one server."""
    s, c = job.settings_as(LiveSettings), job.cluster
    if job.disagg is not None or c.instances > 1:
        from engines.server.router import check_policy  # here: the router's server code (aiohttp) only where one runs

        try:
            for name in ("router", "decode_router"):
                if getattr(c, name) is not None:
                    check_policy(getattr(c, name), f"cluster.{name}")
        except ValueError as e:
            raise HarnessError(str(e)) from None
    if job.disagg is not None:
        plan = job.disagg
        servers = role_specs(server_spec(job, plan.prefill), plan.prefill, plan.decode, plan.transfers, c,
                             s.kv_capacity_tokens)
        return ClusterSpec(servers, c.router, c.decode_router, s.port, tuple(c.knobs.items()))
    if c.instances == 1:
        return None
    base = server_spec(job)
    if base.kind != "inrepo":
        raise HarnessError(f"cluster.instances={c.instances} live runs the in-repo server only, got server={base.kind}")
    replicas = tuple((f"replica {i}", dataclasses.replace(base, port=None)) for i in range(c.instances))
    return ClusterSpec(replicas, c.router, None, s.port, tuple(c.knobs.items()))


class LiveBackend:
    """One server for every probe of one scheduler's search (a vLLM start costs about a minute);
    probes run back to back, each after the previous one's requests have finished or been aborted."""

    name: ClassVar[str] = "live"
    deterministic: ClassVar[bool] = False

    def __init__(self, job: BackendJob) -> None:
        self.job = job
        self.cluster = cluster_spec(job)  # several servers behind the in-repo router, or None
        self.spec = server_spec(job) if self.cluster is None else self.cluster.servers[0][1]
        if self.cluster is not None:
            for _, spec in self.cluster.servers:
                spec.server_config(0)  # a bad role setting fails here, in one line, before anything starts
        self._process: ServerProcess | ClusterProcesses | None = None
        self._trace_dir: tempfile.TemporaryDirectory | None = None
        self._health: HealthWatch | None = None
        self.endpoint: Endpoint | None = None

    def __enter__(self) -> LiveBackend:
        if self.cluster is not None:
            process = ClusterProcesses(self.cluster).__enter__()  # all up and warm (or all stopped, raised)
            endpoint = process.endpoint
        else:
            if self.spec.kind == "vllm" and self.spec.vllm_scheduler == "plugin":  # the plugin's trace of this server
                self._trace_dir = tempfile.TemporaryDirectory(prefix="vllm-trace-")
                self.spec = dataclasses.replace(self.spec, vllm_trace=str(Path(self._trace_dir.name) / "iterations.jsonl"))
            launch, endpoint = self.spec.launch()
            process = ServerProcess(launch)
            process.__enter__()  # started, healthy and warmed up (or it raised, nothing left running)
        self._process, self.endpoint = process, endpoint
        self._health = HealthWatch(endpoint.base_url, self.job.settings.health_timeout_s).__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        process, health = self._process, self._health
        self._process, self._health, self.endpoint = None, None, None
        if health is not None:
            health.__exit__(*exc)
        if process is not None:
            process.__exit__(*exc)

    def iteration_trace(self):
        """The vLLM plugin's iteration trace of this server so far (a DataFrame: iteration_frame),
        or None (another server kind, or native vLLM). The file lives in a temporary folder, removed
        with the backend object."""
        path = self.spec.vllm_trace
        return iteration_frame(path, self.job.scheduler_name) if path and Path(path).exists() else None

    def server_gone(self) -> str | None:
        """Why the server can no longer be measured (it exited, or stopped answering /health)."""
        p = self._process
        if isinstance(p, ClusterProcesses):
            reason = p.gone()
        else:
            code = p.proc.poll() if p is not None and p.proc is not None else None
            reason = None if code is None else f"server exited with status {code}"
        return reason or (self._health.problem() if self._health is not None else None)

    def _broken(self, reason: str) -> RunBroken:
        p = self._process
        if isinstance(p, ClusterProcesses):
            return RunBroken(f"{self.spec.kind} cluster for {self.job.scheduler_name}: {p.describe(reason)}")
        where = f"{self.spec.kind} server for {self.job.scheduler_name} at {self.spec.host} (pid {p.pid if p else '?'})"
        tail = f"\n{p.tail_text(12)}" if p is not None else ""
        return RunBroken(f"{where}: {reason}{tail}")

    def run(self, requests: Sequence[RequestSpec], label: str = "") -> BackendRun:
        if self.endpoint is None:
            raise RuntimeError("LiveBackend.run outside `with`: the server is not started")
        return measure(requests, self.endpoint, self.job, label, self.server_gone, self._broken)


Backend = LiveBackend
