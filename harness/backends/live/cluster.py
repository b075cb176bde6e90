"""A cluster live: in-repo servers behind the in-repo router (engines/server/router), each its own
process on loopback, the load generator driving the router as it drives one server.

Disaggregated (`cluster.prefill_instances`/`decode_instances`): prefill servers (role prefill,
the experiment's scheduler, the prefill role's deployment), decode servers (role decode, each
told the link from every prefill server as the plan's `transfers[p][d]` priced it, over
min(prefill GPUs, decode GPUs) lanes, in the plan's transfer mode), the router in front
(`cluster.router` for prefill servers, `cluster.decode_router` for decode servers). The same
scheduler code as the simulator runs in every server; the real-time twin prices each iteration
and each KV transfer (engines/server/handoff.py). Colocated (`cluster.instances` > 1): replicas
of the one deployment behind the router.

Every server starts at once and must be healthy and warmed up before the router starts; any
failure stops whatever was started. Leaving stops the router first, then every server; a server
that exits while the cluster is up is named by `gone()` (the run then breaks, as for one server).
"""
from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from common.errors import HarnessError
from harness.backends.live.lifecycle import LaunchSpec, ServerProcess, free_port
from harness.backends.live.server import Endpoint, LiveServerSpec, server_knobs
from harness.paths import ROOT as REPO_ROOT


@dataclass(frozen=True)
class ClusterSpec:
    servers: tuple[tuple[str, LiveServerSpec], ...]  # (name, spec): "prefill 0", "decode 1", "replica 0"
    router: str = "round_robin"
    decode_router: str | None = None
    port: int | None = None  # the router's; None: a free one (every server always gets a free one)
    router_options: tuple[tuple[str, object], ...] = ()  # `router`'s knobs (cluster.router_options)


def role_specs(base: LiveServerSpec, prefill, decode, transfers, cluster,
               kv_capacity_tokens: int | None = None) -> tuple[tuple[str, LiveServerSpec], ...]:
    """The servers of a disaggregated cluster: `prefill`/`decode` are the roles' DeploymentPlans,
    `transfers[p][d]` the plan's KvTransfers, `base` the spec every server shares;
    `kv_capacity_tokens` (backend.kv_capacity_tokens) overrides each role's planned KV pool."""
    if base.kind != "inrepo" or base.config.executor == "torch":
        raise HarnessError(f"disaggregated prefill/decode live runs the in-repo server with the realtime or null "
                           f"executor (a decode server cannot receive real KV), got server={base.kind} "
                           f"executor={base.config.executor}")
    for role, d in (("prefill", prefill), ("decode", decode)):
        if d.pp != 1:
            raise HarnessError(f"backend=live with the in-repo server runs pp=1 only, got a {role} instance with pp={d.pp}")

    def of(d, role: str, **more) -> LiveServerSpec:
        kv = kv_capacity_tokens or int(d.kv_capacity_tokens)  # each role's own pool, as the simulator sizes it
        return dataclasses.replace(base, config=server_knobs(base.config, tp=d.tp, kv_capacity_tokens=kv, role=role, **more),
                                   port=None)

    lanes = min(prefill.tp, decode.tp)
    out = [(f"prefill {p}", of(prefill, "prefill")) for p in range(cluster.prefill_instances)]
    for d in range(cluster.decode_instances):
        links = [transfers[p][d].link.name for p in range(cluster.prefill_instances)]
        link = links[0] if len(set(links)) == 1 else ",".join(links)
        out.append((f"decode {d}", of(decode, "decode", kv_link=link, kv_transfer_lanes=lanes,
                                      kv_transfer=transfers[0][d].mode)))
    return tuple(out)


class ClusterProcesses:
    """The cluster's processes, as a context manager; `endpoint` is the router's."""

    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec
        self.processes: list[tuple[str, ServerProcess]] = []
        self.endpoint: Endpoint | None = None

    def __enter__(self) -> ClusterProcesses:
        try:
            started = []
            for name, spec in self.spec.servers:
                launch, endpoint = spec.launch()
                proc = ServerProcess(launch)
                self.processes.append((name, proc))
                proc.start()
                started.append((proc, endpoint))
            for proc, _ in started:  # all start at once; each must be up and warm
                proc.wait_ready()
                proc.warm_up()
            self._start_router([ep for _, ep in started])
        except BaseException:
            self.__exit__()
            raise
        return self

    def _start_router(self, endpoints: list[Endpoint]) -> None:
        first = self.spec.servers[0][1]
        port = self.spec.port or free_port(first.host)
        urls = [(name.split()[0], ep.base_url) for (name, _), ep in zip(self.spec.servers, endpoints)]
        flags = [f"--{role}={url}" for role, url in urls]
        flags += ["--router", self.spec.router, "--host", first.host, "--port", str(port),
                  "--block-size", str(first.config.block_size)]  # prompts hashed as the servers' caches hash them
        flags += [f"--router-option={k}={json.dumps(v)}" for k, v in self.spec.router_options]
        if self.spec.decode_router:
            flags += ["--decode-router", self.spec.decode_router]
        log = None if first.log_dir is None else str(Path(first.log_dir) / f"router-{first.scheduler.policy}-{port}.log")
        base_url = f"http://{first.host}:{port}"
        launch = LaunchSpec(
            command=[sys.executable, "-m", "engines.server.router", *flags], base_url=base_url, model=first.name,
            env={"PYTHONPATH": str(REPO_ROOT)}, cwd=str(REPO_ROOT), ready_timeout_s=first.ready_timeout_s,
            stop_timeout_s=first.stop_timeout_s, log_path=log, api_key=first.api_key)
        router = ServerProcess(launch)
        self.processes.insert(0, ("router", router))
        router.__enter__()
        self.endpoint = dataclasses.replace(endpoints[0], base_url=base_url)

    def __exit__(self, *exc: object) -> None:
        processes, self.processes = self.processes, []
        for _, proc in processes:  # the router first: no new requests reach a server being stopped
            proc.stop()

    def gone(self) -> str | None:
        """The first process that has exited, named, or None."""
        for name, proc in self.processes:
            code = proc.proc.poll() if proc.proc is not None else None
            if code is not None:
                return f"{name} server exited with status {code}" if name != "router" else f"router exited with status {code}"
        return None

    def describe(self, reason: str) -> str:
        """`reason` with the log tail of the process it names (else the router's)."""
        named = [(n, p) for n, p in self.processes if reason.startswith(n + " ")] or self.processes[:1]
        if not named:
            return reason
        name, proc = named[0]
        return f"{name} (pid {proc.pid}): {reason}\n{proc.tail_text(12)}"
