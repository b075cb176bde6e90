"""One experiment: a deployment, a workload, an SLO, and a capacity search per scheduler.

`plan_experiment` resolves and validates everything from the config before anything runs (bad
input fails fast, nothing written); `run_probe` simulates one rate for one scheduler;
`search_capacity` runs the paper's capacity search for one scheduler.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from engines.schedulers import POLICIES, SchedulerConfig, make_engine
from harness.backends.sim import simulate
from harness.capacity import CapacityResult, Probe, find_capacity
from harness.deployment import SimDeployment, build_deployment
from common.errors import HarnessError
from harness.metrics import Slo, SloVerdict, Summary, check_slo, summarize
from harness.probe_cache import ProbeCache
from harness.records import RequestRecord, RequestSpec
from harness.results import records_frame
from harness.slo import resolve_slo
from harness.workload import Workload, arrival_offsets, load_workload, make_requests


@dataclass(frozen=True)
class SearchSettings:
    num_requests: int
    start_qps: float
    rel_tol: float
    min_qps: float
    max_qps: float
    time_limit_s: float | None
    repeats: int = 1  # capacity searches with seeds seed, seed+1, ...
    fixed_qps: float | None = None  # run one probe at this rate instead of a search


@dataclass(frozen=True)
class ExperimentPlan:
    name: str
    seed: int
    deployment: SimDeployment
    max_model_len: int
    slo: Slo
    schedulers: dict[str, SchedulerConfig]
    workload: Workload
    arrival: Mapping
    search: SearchSettings
    fast_forward: bool
    notes: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class ProbeOutcome:
    qps: float
    seed: int
    verdict: SloVerdict
    summary: Summary
    requests: pd.DataFrame = field(repr=False)  # one row per request (harness.results.records_frame)
    records: list[RequestRecord] | None = field(repr=False)  # None when loaded from the probe cache


def _scheduler_configs(cfg: Mapping) -> dict[str, SchedulerConfig]:
    # Entries without `policy` are knob overrides an experiment preset set for a scheduler the
    # command line deselected (e.g. `scheduler=[sarathi]`): skip them.
    out = {}
    for name, sc in (cfg or {}).items():
        if sc is None or "policy" not in sc:
            continue
        fields = {k: v for k, v in sc.items()}
        try:
            out[name] = SchedulerConfig(**fields)
        except TypeError as e:
            raise HarnessError(f"scheduler {name}: {e} (known fields: policy, max_num_seqs, token_budget, max_num_batched_tokens)") from None
        except ValueError as e:
            raise HarnessError(f"scheduler {name}: {e}") from None
    if not out:
        raise HarnessError(f"no scheduler selected; choose from experiments/scheduler ({', '.join(POLICIES)})")
    return out


def plan_experiment(cfg: Mapping) -> ExperimentPlan:
    seed = int(cfg["seed"])
    max_model_len = int(cfg["max_model_len"])
    deployment = build_deployment(cfg["model"], cfg["hardware"], cfg["parallel"], cfg["backend"], max_model_len, cfg.get("perf"))
    slo = resolve_slo(cfg["slo"], deployment.model_name, deployment.perf)
    schedulers = _scheduler_configs(cfg["scheduler"])
    s = cfg["search"]
    search = SearchSettings(
        num_requests=int(s["num_requests"]),
        start_qps=float(s["start_qps"]),
        rel_tol=float(s["rel_tol"]),
        min_qps=float(s["min_qps"]),
        max_qps=float(s["max_qps"]),
        time_limit_s=None if s.get("time_limit_s") is None else float(s["time_limit_s"]),
        repeats=int(s.get("repeats", 1)),
        fixed_qps=None if s.get("fixed_qps") is None else float(s["fixed_qps"]),
    )
    if search.num_requests < 1:
        raise HarnessError(f"search.num_requests must be >= 1, got {search.num_requests}")
    if search.repeats < 1:
        raise HarnessError(f"search.repeats must be >= 1, got {search.repeats}")
    if search.fixed_qps is not None and not (search.fixed_qps > 0 and np.isfinite(search.fixed_qps)):
        raise HarnessError(f"search.fixed_qps must be a positive rate, got {search.fixed_qps}")
    if not (0 < search.min_qps <= search.start_qps <= search.max_qps):
        raise HarnessError(
            f"search: need 0 < min_qps <= start_qps <= max_qps, got {search.min_qps}, {search.start_qps}, {search.max_qps}"
        )
    workload = load_workload(cfg["dataset"], search.num_requests, seed)
    _check_lengths(workload, max_model_len, cfg["dataset"].get("name", "dataset"))
    for name, sc in schedulers.items():  # fail now, not in the middle of the search
        try:
            make_engine(sc, deployment.kv_capacity_tokens, max_model_len, deployment.block_size)
        except ValueError as e:
            raise HarnessError(f"scheduler {name}: {e}") from None
    return ExperimentPlan(
        name=str(cfg["name"]),
        seed=seed,
        deployment=deployment,
        max_model_len=max_model_len,
        slo=slo,
        schedulers=schedulers,
        workload=workload,
        arrival=cfg["arrival"],
        search=search,
        fast_forward=bool(cfg["backend"].get("fast_forward", True)),
    )


def reseed(plan: ExperimentPlan, dataset: Mapping, seed: int) -> ExperimentPlan:
    """The same experiment with another seed: new lengths and arrival gaps."""
    return replace(plan, seed=seed, workload=load_workload(dataset, plan.search.num_requests, seed))


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


def probe_requests(plan: ExperimentPlan, qps: float) -> list[RequestSpec]:
    """The requests of one probe: the plan's lengths with arrivals at `qps` (any backend)."""
    if not qps > 0 or not np.isfinite(qps):
        raise HarnessError(f"QPS must be a positive number, got {qps}")
    return make_requests(plan.workload, arrival_offsets(plan.arrival, qps, plan.search.num_requests, plan.seed))


def probe_outcome(plan: ExperimentPlan, scheduler: str, qps: float, records: list[RequestRecord]) -> ProbeOutcome:
    """A probe's verdict, summary and per-request rows from its records (any backend)."""
    frame = records_frame(records, scheduler=scheduler, seed=plan.seed, qps=qps)
    return ProbeOutcome(qps, plan.seed, check_slo(records, plan.slo), summarize(records), frame, records)


def run_probe(plan: ExperimentPlan, scheduler: str, qps: float) -> ProbeOutcome:
    """One simulated probe at `qps`."""
    requests = probe_requests(plan, qps)
    d = plan.deployment
    engine = make_engine(plan.schedulers[scheduler], d.kv_capacity_tokens, plan.max_model_len, d.block_size)
    records = simulate(
        requests,
        engine,
        d.timer,
        pp=d.pp,
        fast_forward=plan.fast_forward,
        time_limit_s=plan.search.time_limit_s,
    )
    return probe_outcome(plan, scheduler, qps, records)


def search_capacity(
    plan: ExperimentPlan,
    scheduler: str,
    on_probe: Callable[[Probe], None] | None = None,
    cache: ProbeCache | None = None,
    run: Callable[[float], ProbeOutcome] | None = None,
) -> CapacityResult:
    """The capacity search for one scheduler (or its one probe at search.fixed_qps); probes found
    in `cache` are not run again. `run(qps)` runs one probe: the simulator's by default; the live
    backend passes one that drives its server."""
    run = run or (lambda qps: run_probe(plan, scheduler, qps))

    def probe(qps: float) -> Probe:
        outcome = cache.load(scheduler, plan.seed, qps) if cache is not None else None
        if outcome is None:
            outcome = run(qps)
            if cache is not None:
                cache.save(scheduler, outcome)
        return Probe(qps, outcome.verdict.passed, outcome)

    s = plan.search
    if s.fixed_qps is not None:
        p = probe(s.fixed_qps)
        if on_probe is not None:
            on_probe(p)
        return CapacityResult(s.fixed_qps if p.passed else 0.0, float("inf") if p.passed else s.fixed_qps, (p,))
    return find_capacity(probe, s.start_qps, s.rel_tol, s.min_qps, s.max_qps, on_probe=on_probe)
