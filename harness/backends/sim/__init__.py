"""The simulated backend: the engine core on a virtual clock, iterations priced by the
performance model (`loop`: the event loop; `pipeline` and `replay`: pipeline parallelism and its
exact fast-forward). Deterministic: identical requests give bit-identical records."""
from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import ClassVar

from common.errors import HarnessError
from engines.routers import make_router
from engines.perf.offload import plan_kv_offload
from engines.schedulers import make_engine
from harness.backends.base import BackendJob, BackendRun
from harness.backends.sim.autoscale import simulate_autoscaled
from harness.backends.sim.cache_stats import cache_stats, summed
from harness.backends.sim.cluster import simulate_cluster
from harness.backends.sim.gc_pacing import fewer_collections
from harness.backends.sim.data_parallel import simulate_vllm_dp
from harness.backends.sim.disagg import simulate_disaggregated
from harness.backends.sim.iterations import IterationLog
from harness.backends.sim.loop import IterationTimer, simulate
from harness.backends.sim.partition import partition_plan, simulate_partitioned
from harness.backends.sim.sessions import has_sessions
from harness.backends.sim.timer import OffloadPriced
from harness.records import RequestRecord, RequestSpec
from harness.settings.sim import SimSettings

__all__ = ["Backend", "IterationTimer", "SimBackend", "SimSettings", "simulate", "simulate_cluster", "simulate_disaggregated"]


class SimBackend:
    name: ClassVar[str] = "sim"
    deterministic: ClassVar[bool] = True
    # Where a run's records go instead of being returned (None: returned): sink(indices, records), the
    # records of the requests at those input indices. A cluster run apart (partition.py) hands over
    # each instance's as they come, so they are never all held at once (a 64-replica day's take
    # some 16 GB: benchmarks/bench_fleet.py --stream), as a sequence that builds each record as it is
    # read and gives a field's column whole (record_columns.field_column); any other run, all of
    # them at its end, as a list.
    record_sink: Callable[[Sequence[int], Sequence[RequestRecord]], None] | None = None

    def __init__(self, job: BackendJob) -> None:
        self.conf = job.settings_as(SimSettings)
        if job.autoscale is not None and (job.concurrency is not None or job.deployment.dp > 1):
            raise HarnessError("cluster.autoscale scales colocated replicas under an open-loop arrival (arrival=diurnal, "
                               "poisson, ...); not a closed loop or DP ranks (parallel.dp > 1)")
        if job.concurrency is not None and (job.disagg is not None or job.cluster.num_instances > 1 or job.replicas):
            raise HarnessError("arrival=closed_loop is simulated for one engine; a cluster's offline run takes "
                               "arrival=at_once (every request waiting at t=0)")
        if job.deployment.dp > 1 and (job.disagg is not None or job.cluster.num_instances > 1 or job.replicas
                                      or job.concurrency is not None):
            raise HarnessError(f"parallel.dp={job.deployment.dp}: DP ranks are simulated as one engine's ranks under an "
                               "open-loop arrival; use cluster.instances=1 without prefill/decode instances or replicas")
        self.job = job
        # Each engine instance's deployment plan (DP ranks: one a rank) and configuration, built once;
        # every probe builds fresh engines from them.
        d = job.deployment
        self.plans = () if job.disagg is not None else (
            [p for n, p in job.replicas for _ in range(n)] or [d] * max(job.cluster.instances, d.dp))
        self.configs = tuple(self._config(p) for p in self.plans)
        self.roles = () if job.disagg is None else (job.engine_config(job.disagg.prefill, role="prefill"),
                                                    job.engine_config(job.disagg.decode, role="decode"))

    def __enter__(self) -> SimBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def _config(self, d):
        """Deployment plan `d`'s engine configuration and its host tier's pricing (None: no tier)."""
        job = self.job
        if not job.kv_offload_gib or d.dp > 1:  # DP ranks with a tier are refused when run
            return job.engine_config(d), None
        offload = plan_kv_offload(d.perf.deployment, d.block_size)
        return job.engine_config(d, host_kv_blocks=offload.blocks_in(job.kv_offload_gib)), offload

    def _engine(self, d, config, offload):
        """An engine built from `config` and the timer of deployment plan `d` (priced for its tier, if any)."""
        return make_engine(config), d.timer if offload is None else OffloadPriced(d.timer, offload)

    def run(self, requests: Sequence[RequestSpec], label: str = "") -> BackendRun:
        with fewer_collections():
            out = self._run(requests)
        if self.record_sink is not None and out.records:
            self.record_sink(range(len(out.records)), out.records)
            out = BackendRun([], out.diagnostics)
        return out

    def _run(self, requests: Sequence[RequestSpec]) -> BackendRun:
        job, d = self.job, self.job.deployment
        stats: dict = {}
        if has_sessions(requests) and (job.disagg is not None or job.replicas or d.dp > 1):
            raise HarnessError("sessions (dataset.sessions: turns released by answers) are simulated on one engine or "
                               "its colocated replicas (cluster.instances); not on prefill/decode instances, replicas "
                               "or DP ranks")
        if d.dp > 1 and job.kv_offload_gib:
            raise HarnessError("engine.kv_offload_gib (a host KV tier) is not modelled with DP ranks (parallel.dp > 1)")
        if job.disagg is not None:  # prefill and decode instances, each role's engines built from its config
            c, plan, (prefill, decode) = job.cluster, job.disagg, self.roles
            role = lambda d, count, config: ([make_engine(config) for _ in range(count)], [d.timer] * count, d.pp)  # noqa: E731
            return BackendRun(simulate_disaggregated(
                requests, role(plan.prefill, c.prefill_instances, prefill), role(plan.decode, c.decode_instances, decode),
                plan.transfers, (make_router(c.router), make_router(c.decode_router or c.router)),
                fast_forward=self.conf.fast_forward, time_limit_s=job.time_limit_s, stats=stats), stats)
        if job.autoscale is not None:  # replicas started and drained during the run (cluster.autoscale)
            router = make_router(job.cluster.router, **job.cluster.knobs)
            if job.cluster.workers > 1:  # scaling decisions read the whole fleet: no replica runs apart
                print(f"cluster.workers={job.cluster.workers}: simulating the cluster in one process: an autoscaled "
                      "fleet's decisions read every replica's state", file=sys.stderr)
            start = lambda: self._engine(d, *self.configs[0])  # noqa: E731  (each replica the autoscaler starts)
            return BackendRun(simulate_autoscaled(requests, start, router, job.autoscale, pp=d.pp,
                                                  fast_forward=self.conf.fast_forward, time_limit_s=job.time_limit_s,
                                                  stats=stats), stats)
        if d.dp > 1:  # DP ranks in lockstep through their expert-parallel MoE layers
            return BackendRun(simulate_vllm_dp(requests, [config for config, _ in self.configs], d.timer,
                                               time_limit_s=job.time_limit_s, stats=stats), stats)
        if job.cluster.num_instances > 1 or job.replicas:  # one instance is today's single engine, by the same code
            engines, timers = zip(*(self._engine(p, *c) for p, c in zip(self.plans, self.configs)))
            return BackendRun(self._run_cluster(requests, engines, timers, [p.pp for p in self.plans], stats), stats)
        engine, timer = self._engine(d, *self.configs[0])
        log = IterationLog(d.timer, len(requests), batch=job.concurrency) if job.iteration_log else None
        if log is not None and job.prefix_caching:
            log.cache = engine.blocks.stats  # the log's cached_tokens: what the cache saved, iteration by iteration
        records = simulate(requests, engine, timer, pp=d.pp, fast_forward=self.conf.fast_forward,
                           time_limit_s=job.time_limit_s, stats=stats, give_up=job.give_up,
                           concurrency=job.concurrency, log=log)
        if log is not None:
            stats.update(iterations=log.columns(), request_bubbles=log.request_bubbles())
        if job.prefix_caching:  # what the cache saved: prompt tokens found (readmissions too), evictions
            stats["prefix_cache"] = cache_stats(engine)
        return BackendRun(records, stats)

    def _run_cluster(self, requests: Sequence[RequestSpec], engines, timers, pp: list[int], stats: dict):
        """Colocated instances behind the router: apart in cluster.workers processes when routing
        reads no instance state (partition.py), else (with the reason printed) the one loop, the
        only one that stops a probe early (search.stop_early; apart, each probe runs whole)."""
        job = self.job
        def router():
            return make_router(job.cluster.router, **job.cluster.knobs)
        caching = job.prefix_caching
        # Planning calls the router (its turns advance): the loop, if it runs, gets a fresh one.
        plan = partition_plan(requests, router(), len(engines), pp) if job.cluster.workers > 1 else "cluster.workers=1"
        if isinstance(plan, str):
            if job.cluster.workers > 1:
                print(f"cluster.workers={job.cluster.workers}: simulating the cluster in one process: {plan}",
                      file=sys.stderr)
            records = simulate_cluster(requests, engines, timers, router(), pp=pp, fast_forward=self.conf.fast_forward,
                                       time_limit_s=job.time_limit_s, stats=stats, give_up=job.give_up)
            each = [cache_stats(e) for e in engines] if caching else None
        else:
            records, each = simulate_partitioned(requests, engines, timers, plan, job.cluster.workers,
                                                 fast_forward=self.conf.fast_forward, time_limit_s=job.time_limit_s,
                                                 caching=caching, stats=stats, sink=self.record_sink)
        if each is not None:  # the fleet's: every instance's counters summed
            stats["prefix_cache"] = summed(each)
        return records


Backend = SimBackend

