"""One experiment, planned: a deployment, a workload, an SLO, a backend's settings and a capacity
search per scheduler.

`plan_experiment` resolves and validates everything from the config before anything runs (bad
input fails fast, nothing written); the plan is typed and complete, so nothing downstream reads
the raw config. `ExperimentPlan.job(scheduler)` is what a backend serves.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from common.errors import HarnessError
from engines.core.config import PER_SCHEDULER
from engines.schedulers import EngineConfig, SchedulerConfig, make_engine, policy_names, policy_spec
from harness.backends import backend_class
from harness.backends.base import BackendJob, GiveUp
from harness.backends.scaling import scale_plan
from harness.backends.deployment import (DeploymentPlan, DisaggPlan, check_one_release, deployment_of,
                                         plan_disaggregation, plan_replicas)
from harness.metrics import Slo
from harness.experiment.checks import check_backend_runs, check_offline, check_workload, is_offline
from harness.experiment.slo import resolve_slo
from harness.settings.backend import BackendSettings
from harness.settings.cluster import ClusterSettings
from harness.settings.experiment import ExperimentConfig
from harness.settings.offline import OfflineSettings
from harness.settings.search import SearchSettings
from harness.typed import did_you_mean
from harness.workload import Workload, concurrency_limit, load_workload


DRAIN_SLACK = 2.0  # ExperimentPlan.drain_s


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
        s = self.slo  # a simulated probe stops once failing the paper's criterion is certain (search.stop_early)
        give_up = (GiveUp(s.tbt_s, s.tbt_quantile, s.scheduling_delay_s, s.scheduling_delay_quantile)
                   if self.search.stop_early and s.criterion == "paper" else None)
        return BackendJob(
            scheduler_name=scheduler, scheduler=self.schedulers[scheduler], deployment=self.deployment,
            max_model_len=self.max_model_len, seed=self.seed, settings=self.backend,
            time_limit_s=self.search.time_limit_s, concurrency=concurrency_limit(self.arrival), progress=progress,
            cluster=self.cluster, disagg=self.disagg, replicas=self.replicas, give_up=give_up,
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
                f"probes of {s.num_requests} requests from {rate:g} QPS "
                f"({'doubled or halved' if s.growth == 2 else f'stepped by x{s.growth:g}'} until one passes and one "
                f"fails, within [{s.min_qps:g}, {s.max_qps:g}] QPS, then bisected to {s.rel_tol:.1%})")
        end = (f"cut at {s.time_limit_s:g} s" if s.time_limit_s is not None
               else f"cut {_duration(self.drain_s)} after its last arrival")
        return (f"{what}; the first sends for about {_duration(s.num_requests / rate)}, each probe {end}, or as soon "
                f"as more than {s.max_error_fraction:.0%} of its requests failed (search.max_error_fraction)")


def scheduler_configs(config: ExperimentConfig) -> tuple[dict[str, SchedulerConfig], frozenset[str]]:
    """Each scheduler's config, and those whose engines keep a prefix cache (the engine's settings a
    scheduler's entry may carry, engines.core.config.PER_SCHEDULER, go to its engine, not its policy)."""
    out, caching = {}, set()
    for name, sc in config.schedulers().items():
        knobs = {str(k): v for k, v in sc.items() if k != "policy" and k not in PER_SCHEDULER}
        if config.engine.prefix_caching or sc.get("prefix_caching"):
            caching.add(name)
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


def plan_experiment(config: ExperimentConfig) -> ExperimentPlan:
    """Everything resolved and checked (harness.experiment.checks) before anything runs."""
    c, backend, search, cluster = config, config.backend, config.search, config.cluster
    deployment = deployment_of(c)
    offline = c.offline if is_offline(c.arrival) else None
    check_backend_runs(c, deployment, offline is not None)
    disagg = plan_disaggregation(c) if cluster.disaggregated else None
    slo = None if offline is not None else replace(resolve_slo(c.slo, deployment.model_name, deployment.perf),
                                                   max_error_fraction=search.max_error_fraction)
    own_server = getattr(backend_class(backend.name), "server_label", None)
    caching: frozenset[str] = frozenset()
    if own_server is not None:  # a server of its own (backend=endpoint): one label, its name; none of our policies runs
        label, knobs = own_server(backend)
        schedulers, scheduler_knobs = {label: None}, {label: knobs}
    else:
        schedulers, caching = scheduler_configs(c)
        check_one_release(deployment.perf.deployment, schedulers)
        scheduler_knobs = {name: {**dict(c.scheduler[name]), **({"prefix_caching": True} if name in caching else {})}
                           for name in schedulers}
    if offline is not None:
        check_offline(search, offline, schedulers)
    workload = load_workload(c.dataset, search.num_requests, c.seed)
    check_workload(c, workload, offline is not None)
    count = workload.sessions.num_sessions if workload.sessions is not None else 0
    notes = () if not count else (
        f"sessions: a probe holds {count} sessions of {len(workload) / count:.1f} turns on average, each turn "
        "released by the answer before it; however fast they start, at most that many are in the engine at once, "
        "so a capacity at search.max_qps is the probe's limit, not the engine's (raise search.num_requests)",)
    replicas = plan_replicas(c) if cluster.replicas else ()
    pools = ([("prefill", disagg.prefill), ("decode", disagg.decode)] if disagg is not None
             else [("both", d) for _, d in replicas] or [("both", deployment)])
    for name, sc in schedulers.items():  # fail now, not in the middle of the search
        for role, d in pools if sc is not None else ():
            try:
                make_engine(EngineConfig(sc, d.kv_capacity_tokens, c.max_model_len, d.block_size, role=role,
                                         prefix_caching=name in caching,
                                         host_kv_blocks=1 if c.engine.kv_offload_gib else 0))  # a tier needs prefix caching
            except ValueError as e:
                where = "" if role == "both" else f" on a {role} instance"
                raise HarnessError(f"scheduler {name}{where}: {e}") from None
    plan = ExperimentPlan(
        name=c.name, seed=c.seed, deployment=deployment, max_model_len=c.max_model_len, slo=slo,
        schedulers=schedulers, scheduler_knobs=scheduler_knobs, slo_kind=c.slo.kind, slo_source=c.slo.source,
        workload=workload, arrival=dict(c.arrival), search=search, backend=backend, dataset=dict(c.dataset),
        cluster=cluster, disagg=disagg, replicas=replicas, offline=offline, notes=notes,
        kv_offload_gib=c.engine.kv_offload_gib, prefix_caching=caching,
    )
    for name in schedulers:  # the backend's own checks of the plan (no server is started)
        backend_class(backend.name)(plan.job(name, progress=False))
    return plan


def _duration(seconds: float) -> str:
    for unit, size in (("h", 3600), ("min", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


def reseed(plan: ExperimentPlan, seed: int) -> ExperimentPlan:
    """The same experiment with another seed: new lengths and arrival gaps."""
    return replace(plan, seed=seed, workload=load_workload(plan.dataset, plan.search.num_requests, seed))
