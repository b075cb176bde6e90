"""One experiment, planned: a deployment, a workload, an SLO, a backend's settings and a capacity
search per scheduler.

`plan_experiment` resolves and validates everything from the config before anything runs (bad
input fails fast, nothing written); the plan is typed and complete, so nothing downstream reads
the raw config. `ExperimentPlan.job(scheduler)` is what a backend serves.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np
from omegaconf import OmegaConf

from common.errors import HarnessError
from engines.core.config import PER_SCHEDULER
from engines.schedulers import EngineConfig, SchedulerConfig, make_engine, policy_names, policy_spec
from harness.backends import backend_class, backend_settings
from harness.backends.base import BackendJob, BackendSettings, ClusterSettings, GiveUp
from harness.backends.scaling import check_scaled_run, scale_plan
from harness.backends.deployment import (DeploymentPlan, DisaggPlan, build_deployment, check_one_release,
                                         plan_disaggregation, plan_replicas)
from harness.metrics import Slo
from harness.search.offline import OfflineSettings, check_offline, is_offline
from harness.search.slo import SloSettings, resolve_slo
from harness.typed import did_you_mean, typed
from harness.workload import Workload, arrival_offsets, concurrency_limit, load_workload


EXECUTORS = ("local", "ray")
DRAIN_SLACK = 2.0  # ExperimentPlan.drain_s


@dataclass(frozen=True)
class EngineSettings:
    """`engine`: switches of the engine core every scheduler of the experiment runs with."""

    # Automatic prefix caching (engines/core/prefix_cache.py) for every scheduler; off as in the
    # paper's engines (a scheduler's own `prefix_caching: true` turns it on for that one alone:
    # engines.core.config.PER_SCHEDULER).
    prefix_caching: bool = False
    # A host-memory KV tier under the prefix cache of each engine instance, in GiB (engines/core/
    # kv_tier.py, priced over PCIe by engines/perf/offload.py); 0: none, evicted blocks are lost.
    kv_offload_gib: float = 0.0
    # The node's host memory the tier must fit in, GiB (a DGX A100 has 1 TiB; the catalog has no host memory).
    host_memory_gib: float = 1024.0


@dataclass(frozen=True)
class SearchSettings:
    """The capacity search; the defaults are the paper's (Sarathi-Serve Sec. 5: 2048 requests per
    probe, binary search on QPS to ~2.5 %). The schema of experiments/search/*.yaml."""

    num_requests: int = 2048
    start_qps: float = 1.0
    rel_tol: float = 0.025
    min_qps: float = 0.01
    max_qps: float = 1000.0
    time_limit_s: float | None = None  # stop a probe at this time; unfinished requests count against it
    repeats: int = 1  # capacity searches with seeds seed, seed+1, ...
    fixed_qps: float | None = None  # run one probe at this rate instead of a search
    max_error_fraction: float = 0.0  # a probe with more failed requests than this share fails (and says why)
    workers: int = 1  # probes at once: each round of the search probes this many rates (deterministic backends)
    executor: str = "local"  # where a round's probes run: local (a process pool here) | ray (harness.search.executor)
    ray_address: str | None = None  # executor=ray: null = a local Ray for the run (or the Ray this job runs in), auto, HOST:PORT
    # Stop a simulated probe once failing the paper's criterion is certain (one engine, pipelined or
    # not; the verdict is the same, its records end there): the planner's screening probes use it.
    stop_early: bool = False
    # Searches at once (one per scheduler and seed), each in a local process, simulated backends only:
    # 0 = one per CPU where probes have >= 512 requests (harness.search.executor.searches_at_once), 1 = serial.
    searches_at_once: int = 0

    def __post_init__(self) -> None:
        if self.num_requests < 1:
            raise ValueError(f"num_requests must be >= 1, got {self.num_requests}")
        if self.repeats < 1:
            raise ValueError(f"repeats must be >= 1, got {self.repeats}")
        if self.fixed_qps is not None and not (self.fixed_qps > 0 and np.isfinite(self.fixed_qps)):
            raise ValueError(f"fixed_qps must be a positive rate, got {self.fixed_qps}")
        if not (0 < self.min_qps <= self.start_qps <= self.max_qps):
            raise ValueError(f"need 0 < min_qps <= start_qps <= max_qps, got {self.min_qps}, {self.start_qps}, {self.max_qps}")
        if not 0 < self.rel_tol < 1:
            raise ValueError(f"rel_tol must be in (0, 1), got {self.rel_tol}")
        if not 0 <= self.max_error_fraction <= 1:
            raise ValueError(f"max_error_fraction must be in [0, 1], got {self.max_error_fraction}")
        if self.time_limit_s is not None and not self.time_limit_s > 0:
            raise ValueError(f"time_limit_s must be > 0, got {self.time_limit_s}")
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1 (1: the serial search), got {self.workers}")
        if self.searches_at_once < 0:
            raise ValueError(f"searches_at_once must be >= 0 (0: one per CPU), got {self.searches_at_once}")
        if self.executor not in EXECUTORS:
            raise ValueError(f"executor must be one of {', '.join(EXECUTORS)}, got {self.executor!r}")


def check_workers(search: SearchSettings, backend: str) -> None:
    """Parallel probes need a deterministic backend (the simulator): one server cannot take them."""
    if search.workers > 1 and not backend_class(backend).deterministic:
        raise HarnessError(f"search.workers={search.workers}: backend {backend} measures one server, which cannot "
                           f"take parallel probes; use search.workers=1 (parallel probes are for backend=sim)")


@dataclass(frozen=True)
class ExperimentPlan:
    name: str
    seed: int
    deployment: DeploymentPlan
    max_model_len: int
    slo: Slo | None  # None for an offline run (`offline`)
    slo_kind: str  # strict | relaxed
    slo_source: str  # paper | derived
    schedulers: dict[str, SchedulerConfig | None]  # None: the server's own (backend=endpoint runs none of ours)
    scheduler_knobs: dict[str, dict]  # each scheduler's config as written (saved in summary.json)
    workload: Workload
    arrival: dict  # the arrival config (experiments/arrival), plain
    search: SearchSettings
    backend: BackendSettings
    dataset: dict  # the dataset config, plain: reseed() loads the same dataset with another seed
    cluster: ClusterSettings = field(default_factory=ClusterSettings)
    disagg: DisaggPlan | None = None  # a disaggregated cluster's roles (cluster.prefill_instances > 0)
    replicas: tuple[tuple[int, DeploymentPlan], ...] = ()  # (count, deployment) per group of cluster.replicas
    notes: tuple[str, ...] = field(default=())
    # An offline throughput run (a rate-free arrival: harness/search/offline.py); None: capacity searches.
    # Such a plan has no SLO (slo is None): nothing is judged.
    offline: OfflineSettings | None = None
    kv_offload_gib: float = 0.0  # engine.kv_offload_gib: each instance's host KV tier
    # The schedulers whose engines keep a prefix cache (engine.prefix_caching, or the scheduler's own key).
    prefix_caching: frozenset[str] = frozenset()

    def job(self, scheduler: str, progress: bool = True) -> BackendJob:
        """What a backend needs to serve `scheduler` of this plan."""
        return BackendJob(
            scheduler_name=scheduler, scheduler=self.schedulers[scheduler], deployment=self.deployment,
            max_model_len=self.max_model_len, seed=self.seed, settings=self.backend,
            time_limit_s=self.search.time_limit_s, concurrency=concurrency_limit(self.arrival), progress=progress,
            cluster=self.cluster, disagg=self.disagg, replicas=self.replicas, give_up=self._give_up(),
            max_error_fraction=self.search.max_error_fraction, drain_s=self.drain_s, kv_offload_gib=self.kv_offload_gib,
            prefix_caching=scheduler in self.prefix_caching,
            autoscale=scale_plan(self.cluster.autoscale, self.cluster.instances, self.deployment, self.slo),
        )

    @property
    def drain_s(self) -> float | None:
        """How long a live probe without search.time_limit_s runs past its last planned arrival:
        DRAIN_SLACK x what the plan's longest request takes when it just meets the SLO (its
        scheduling delay or TTFT limit, then every token at the TBT or TPOT limit). A request
        still running then has failed its SLO by far; waiting on it (a server that never ends a
        stream, one that fell hopelessly behind) would only hold the probe. None without an SLO
        (an offline run)."""
        s = self.slo
        if s is None:
            return None
        first = max(s.scheduling_delay_s, s.ttft_s or 0.0)
        return DRAIN_SLACK * (first + int(self.workload.output_lens.max()) * max(s.tbt_s, s.tpot_limit_s))

    def describe_probes(self) -> str:
        """What a live search will send and how long its first probe takes, for the run's header."""
        s = self.search
        rate = s.fixed_qps or s.start_qps
        what = (f"one probe of {s.num_requests} requests at {rate:g} QPS" if s.fixed_qps else
                f"probes of {s.num_requests} requests from {rate:g} QPS (doubled or halved until one passes and one "
                f"fails, within [{s.min_qps:g}, {s.max_qps:g}] QPS, then bisected to {s.rel_tol:.1%})")
        end = (f"cut at {s.time_limit_s:g} s" if s.time_limit_s is not None
               else f"cut {_duration(self.drain_s)} after its last arrival")
        return (f"{what}; the first sends for about {_duration(s.num_requests / rate)}, each probe {end}, or as soon "
                f"as more than {s.max_error_fraction:.0%} of its requests failed (search.max_error_fraction)")

    def _give_up(self) -> GiveUp | None:
        s = self.slo
        if not self.search.stop_early or s.criterion != "paper":
            return None
        return GiveUp(s.tbt_s, s.tbt_quantile, s.scheduling_delay_s, s.scheduling_delay_quantile)


def _scheduler_configs(cfg: Mapping, engine: EngineSettings) -> tuple[dict[str, SchedulerConfig], frozenset[str]]:
    """Each scheduler's config, and those whose engines keep a prefix cache (the engine's settings a
    scheduler's entry may carry, engines.core.config.PER_SCHEDULER, go to its engine, not its policy)."""
    # Entries without `policy` are knob overrides an experiment preset set for a scheduler the
    # command line deselected (e.g. `scheduler=[sarathi]`): skip them.
    out, caching = {}, set()
    for name, sc in (cfg or {}).items():
        if sc is None or "policy" not in sc:
            continue
        knobs = {str(k): v for k, v in sc.items() if k != "policy" and k not in PER_SCHEDULER}
        if engine.prefix_caching or sc.get("prefix_caching"):
            caching.add(str(name))
        try:
            spec = policy_spec(str(sc["policy"]))
        except ValueError as e:
            raise HarnessError(f"scheduler {name}: {e}") from None
        bad = next((k for k in knobs if k not in spec.knob_names), None)
        if bad is not None:
            known = ["policy", *spec.knob_names, *PER_SCHEDULER]
            raise HarnessError(f"scheduler.{name}.{bad}: unknown key{did_you_mean(bad, known)} of policy {spec.name}; "
                               f"known: {', '.join(known)}")
        try:
            out[name] = SchedulerConfig(spec.name, **knobs)
        except ValueError as e:
            raise HarnessError(f"scheduler {name}: {e}") from None
    if not out:
        raise HarnessError(f"no scheduler selected; choose a registered policy ({', '.join(policy_names())}) "
                           "or a preset of experiments/scheduler")
    return out, frozenset(caching & set(out))


def check_cluster_backend(cfg) -> ClusterSettings:
    """The cluster settings, refused where the backend cannot run a cluster (checked before an
    endpoint is asked anything, so a bad config is one line whether the server answers or not)."""
    cluster = typed(ClusterSettings, cfg.get("cluster") or {}, "cluster")
    backend = str(cfg["backend"].get("name", "sim"))
    check_scaled_run(cluster.autoscale, backend, offline=False)  # sim only: refused before an endpoint is asked
    if (cluster.instances > 1 or cluster.disaggregated) and backend not in ("sim", "live"):
        what = "disaggregated prefill/decode" if cluster.disaggregated else f"cluster.instances={cluster.instances}"
        raise HarnessError(f"{what}: only backend=sim and backend=live (in-repo servers behind the in-repo router) "
                           "run a cluster; "
                           f"use one engine (cluster.instances=1, no prefill/decode instances) with backend={backend}")
    return cluster


def plan_experiment(cfg: Mapping) -> ExperimentPlan:
    seed = int(cfg["seed"])
    max_model_len = int(cfg["max_model_len"])
    backend = backend_settings(cfg["backend"])
    deployment = build_deployment(
        cfg["model"], cfg["hardware"], cfg["parallel"], gpu_memory_utilization=backend.gpu_memory_utilization,
        block_size=backend.block_size, max_model_len=max_model_len, perf_cfg=cfg.get("perf"),
    )
    if deployment.dp > 1 and backend.name != "sim":
        raise HarnessError(f"parallel.dp={deployment.dp}: only backend=sim runs data-parallel ranks so far, "
                           f"not backend={backend.name}")
    search = typed(SearchSettings, cfg["search"], "search")
    offline = typed(OfflineSettings, cfg.get("offline") or {}, "offline") if is_offline(cfg["arrival"]) else None
    check_workers(search, backend.name)
    cluster = check_cluster_backend(cfg)
    disagg = None
    if cluster.disaggregated:
        disagg = plan_disaggregation(
            cluster, cfg["model"], cfg["hardware"], cfg["parallel"], gpu_memory_utilization=backend.gpu_memory_utilization,
            block_size=backend.block_size, max_model_len=max_model_len, perf_cfg=cfg.get("perf"))
    slo_settings = typed(SloSettings, cfg["slo"], "slo")
    slo = None if offline is not None else replace(resolve_slo(slo_settings, deployment.model_name, deployment.perf),
                                                   max_error_fraction=search.max_error_fraction)
    engine = typed(EngineSettings, cfg.get("engine") or {}, "engine")
    check_offload(engine, backend.name, cluster, deployment)
    own_server = getattr(backend_class(backend.name), "server_label", None)
    caching: frozenset[str] = frozenset()
    if own_server is not None:  # a server of its own (backend=endpoint): one label, its name; none of our policies runs
        label, knobs = own_server(backend)
        schedulers, scheduler_knobs = {label: None}, {label: knobs}
    else:
        schedulers, caching = _scheduler_configs(cfg["scheduler"], engine)
        check_one_release(deployment.perf.deployment, schedulers)
        scheduler_knobs = {name: {**_plain(cfg["scheduler"][name]), **({"prefix_caching": True} if name in caching else {})}
                           for name in schedulers}
    if offline is not None:
        check_offline(search, offline, schedulers)
    workload = load_workload(cfg["dataset"], search.num_requests, seed)
    if _plain(cfg["arrival"]).get("name") != "trace":  # a bad knob fails here, before anything is written
        arrival_offsets(_plain(cfg["arrival"]), 1.0, 1, seed)
    _check_lengths(workload, max_model_len, cfg["dataset"].get("name", "dataset"))
    if workload.sessions is not None and offline is not None:
        raise HarnessError(f"dataset.sessions: arrival={cfg['arrival'].get('name')} starts no sessions (an offline run); "
                           "sessions start by an open-loop arrival (poisson, gamma, constant)")
    check_scaled_run(cluster.autoscale, backend.name, offline=offline is not None)
    if workload.sessions is not None and (cluster.disaggregated or cluster.replicas):
        raise HarnessError("sessions (dataset.sessions: turns released by answers) run on one engine or on colocated "
                           "replicas of it (cluster.instances); not on prefill/decode instances or cluster.replicas")
    replicas = ()
    if cluster.replicas:
        if backend.name != "sim":
            raise HarnessError(f"cluster.replicas (instances of different deployments): only backend=sim runs them so far, "
                               f"not backend={backend.name}")
        replicas = plan_replicas(
            cluster, cfg["model"], cfg["hardware"], cfg["parallel"], gpu_memory_utilization=backend.gpu_memory_utilization,
            block_size=backend.block_size, max_model_len=max_model_len, perf_cfg=cfg.get("perf"))
    if disagg is not None:
        pools = [("prefill", disagg.prefill), ("decode", disagg.decode)]
    else:
        pools = [("both", d) for _, d in replicas] or [("both", deployment)]
    for name, sc in schedulers.items():  # fail now, not in the middle of the search
        for role, d in pools if sc is not None else ():
            try:
                make_engine(EngineConfig(sc, d.kv_capacity_tokens, max_model_len, d.block_size, role=role,
                                         prefix_caching=name in caching,
                                         host_kv_blocks=1 if engine.kv_offload_gib else 0))  # a tier needs prefix caching
            except ValueError as e:
                where = "" if role == "both" else f" on a {role} instance"
                raise HarnessError(f"scheduler {name}{where}: {e}") from None
    plan = ExperimentPlan(
        name=str(cfg["name"]),
        seed=seed,
        deployment=deployment,
        max_model_len=max_model_len,
        slo=slo,
        schedulers=schedulers,
        scheduler_knobs=scheduler_knobs,
        slo_kind=slo_settings.kind,
        slo_source=slo_settings.source,
        workload=workload,
        arrival=_plain(cfg["arrival"]),
        search=search,
        backend=backend,
        dataset=_plain(cfg["dataset"]),
        cluster=cluster,
        disagg=disagg,
        replicas=replicas,
        offline=offline,
        notes=_session_notes(workload),
        kv_offload_gib=engine.kv_offload_gib,
        prefix_caching=caching,
    )
    for name in schedulers:  # the backend's own checks of the plan (no server is started)
        backend_class(backend.name)(plan.job(name, progress=False))
    return plan


def check_offload(engine: EngineSettings, backend: str, cluster: ClusterSettings, deployment: DeploymentPlan) -> None:
    """engine.kv_offload_gib: a tier that fits the node's host memory, where it is simulated."""
    gib, host = engine.kv_offload_gib, engine.host_memory_gib
    if not (gib >= 0 and host > 0):
        raise HarnessError(f"engine: kv_offload_gib must be >= 0 and host_memory_gib > 0, got {gib!r}, {host!r}")
    if not gib:
        return
    if gib > host:
        raise HarnessError(f"engine.kv_offload_gib={gib:g} GiB is larger than the node's host memory "
                           f"(engine.host_memory_gib={host:g} GiB)")
    if backend != "sim" or cluster.disaggregated or cluster.replicas or deployment.pp > 1:
        raise HarnessError("engine.kv_offload_gib: the host KV tier is simulated so far for backend=sim, pp=1, one "
                           "engine or colocated replicas (cluster.instances); not "
                           + (f"backend={backend}" if backend != "sim" else "this cluster or pipeline"))


def _duration(seconds: float) -> str:
    for unit, size in (("h", 3600), ("min", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


def _session_notes(workload: Workload) -> tuple[str, ...]:
    if workload.sessions is None:
        return ()
    count = workload.sessions.num_sessions
    return (f"sessions: a probe holds {count} sessions of {len(workload) / count:.1f} turns on average, each turn "
            "released by the answer before it; however fast they start, at most that many are in the engine at once, "
            "so a capacity at search.max_qps is the probe's limit, not the engine's (raise search.num_requests)",)


def _plain(node) -> dict:
    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else dict(node)


def reseed(plan: ExperimentPlan, seed: int) -> ExperimentPlan:
    """The same experiment with another seed: new lengths and arrival gaps."""
    return replace(plan, seed=seed, workload=load_workload(plan.dataset, plan.search.num_requests, seed))


def _check_lengths(workload: Workload, max_model_len: int, dataset: str) -> None:
    # The OpenAI-style servers (ours and vLLM) refuse prompt + max_tokens > max_model_len, one token
    # stricter than what the KV cache must hold (the last token is never fed back). Plan by the
    # servers' rule so a workload the simulator accepts is one the live backend can send.
    total = workload.prompt_lens + workload.output_lens
    bad = np.flatnonzero(total > max_model_len)
    if bad.size:
        i = int(bad[0])
        raise HarnessError(
            f"{dataset}: request {i} has prompt {workload.prompt_lens[i]} + output {workload.output_lens[i]} tokens, "
            f"over max_model_len {max_model_len} ({bad.size} such requests)"
        )
