"""Which options combine: each check refuses, in one line, a config no backend can run as asked,
before anything runs (harness.experiment.plan calls them in order; the first that fails is said)."""
from __future__ import annotations

import numpy as np

from common.errors import HarnessError
from harness.backends import backend_class
from harness.backends.deployment import DeploymentPlan
from harness.backends.scaling import check_scaled_run
from harness.settings.experiment import ExperimentConfig
from harness.settings.offline import OfflineSettings
from harness.settings.search import SearchSettings
from harness.workload import Workload, arrival_offsets
from harness.workload.arrivals import RATE_FREE


def is_offline(arrival) -> bool:
    """A rate-free arrival (closed_loop, at_once): an offline throughput run, no capacity search."""
    return (arrival or {}).get("name") in RATE_FREE


def check_workers(search: SearchSettings, backend: str) -> None:
    """Parallel probes need a deterministic backend (the simulator): one server cannot take them."""
    if search.workers > 1 and not backend_class(backend).deterministic:
        raise HarnessError(f"search.workers={search.workers}: backend {backend} measures one server, which cannot "
                           f"take parallel probes; use search.workers=1 (parallel probes are for backend=sim)")


def check_cluster_backend(config: ExperimentConfig) -> None:
    """Refuse a cluster the backend cannot run (checked before an endpoint is asked anything, so a
    bad config is one line whether the server answers or not)."""
    cluster, backend = config.cluster, config.backend.name
    check_scaled_run(cluster.autoscale, backend, offline=False)  # sim only: refused before an endpoint is asked
    if (cluster.instances > 1 or cluster.disaggregated) and backend not in ("sim", "live"):
        what = "disaggregated prefill/decode" if cluster.disaggregated else f"cluster.instances={cluster.instances}"
        raise HarnessError(f"{what}: only backend=sim and backend=live (in-repo servers behind the in-repo router) run "
                           f"a cluster; use one engine (cluster.instances=1, no prefill/decode instances) with backend={backend}")


def check_backend_runs(config: ExperimentConfig, deployment: DeploymentPlan, offline: bool) -> None:
    """What only the simulator runs so far: DP ranks, parallel probes, clusters of other
    deployments, a scaled fleet, a host KV tier (engine.kv_offload_gib, within the node's memory)."""
    backend, cluster = config.backend.name, config.cluster
    if deployment.dp > 1 and backend != "sim":
        raise HarnessError(f"parallel.dp={deployment.dp}: only backend=sim runs data-parallel ranks so far, "
                           f"not backend={backend}")
    check_workers(config.search, backend)
    check_cluster_backend(config)
    gib, host = config.engine.kv_offload_gib, config.engine.host_memory_gib
    if not (gib >= 0 and host > 0):
        raise HarnessError(f"engine: kv_offload_gib must be >= 0 and host_memory_gib > 0, got {gib!r}, {host!r}")
    if gib > host:
        raise HarnessError(f"engine.kv_offload_gib={gib:g} GiB is larger than the node's host memory "
                           f"(engine.host_memory_gib={host:g} GiB)")
    if gib and (backend != "sim" or cluster.disaggregated or cluster.replicas or deployment.pp > 1):
        raise HarnessError("engine.kv_offload_gib: the host KV tier is simulated so far for backend=sim, pp=1, one "
                           "engine or colocated replicas (cluster.instances); not "
                           + (f"backend={backend}" if backend != "sim" else "this cluster or pipeline"))
    check_scaled_run(cluster.autoscale, backend, offline=offline)
    if cluster.replicas and backend != "sim":
        raise HarnessError(f"cluster.replicas (instances of different deployments): only backend=sim runs them so far, "
                           f"not backend={backend}")


def check_offline(search: SearchSettings, settings: OfflineSettings, schedulers) -> None:
    """Search knobs that mean nothing without a search are refused, not ignored."""
    for knob, bad in (("fixed_qps", search.fixed_qps is not None), ("repeats", search.repeats > 1),
                      ("stop_early", search.stop_early), ("time_limit_s", search.time_limit_s is not None)):
        if bad:
            raise HarnessError(f"search.{knob}: an offline run (arrival closed_loop or at_once) runs every request "
                               "once, without a capacity search; leave it unset")
    if settings.baseline is not None and settings.baseline not in schedulers:
        raise HarnessError(f"offline.baseline={settings.baseline!r} is not one of the run's schedulers "
                           f"({', '.join(schedulers)})")


def check_workload(config: ExperimentConfig, workload: Workload, offline: bool) -> None:
    """The arrival's knobs, every request's length, and where sessions can run."""
    if config.arrival.get("name") != "trace":  # a bad knob fails here, before anything is written
        arrival_offsets(dict(config.arrival), 1.0, 1, config.seed)
    check_lengths(workload, config.max_model_len, config.dataset.get("name", "dataset"))
    if workload.sessions is None:
        return
    if offline:
        raise HarnessError(f"dataset.sessions: arrival={config.arrival.get('name')} starts no sessions (an offline "
                           "run); sessions start by an open-loop arrival (poisson, gamma, constant)")
    if config.cluster.disaggregated or config.cluster.replicas:
        raise HarnessError("sessions (dataset.sessions: turns released by answers) run on one engine or on colocated "
                           "replicas of it (cluster.instances); not on prefill/decode instances or cluster.replicas")


def check_lengths(workload: Workload, max_model_len: int, dataset: str) -> None:
    # The OpenAI-style servers (ours and vLLM) refuse prompt + max_tokens > max_model_len, one token
    # stricter than what the KV cache must hold (the last token is never fed back). Plan by the
    # servers' rule so a workload the simulator accepts is one the live backend can send.
    total = workload.prompt_lens + workload.output_lens
    bad = np.flatnonzero(total > max_model_len)
    if bad.size:
        i = int(bad[0])
        raise HarnessError(f"{dataset}: request {i} has prompt {workload.prompt_lens[i]} + output "
                           f"{workload.output_lens[i]} tokens, over max_model_len {max_model_len} ({bad.size} such requests)")
