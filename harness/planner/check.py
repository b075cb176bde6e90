"""The winner's replicas checked in the cluster simulation: R = ceil(target / capacity) replicas
(a P/D unit: R units, P x R prefill and D x R decode instances) behind `least_outstanding`, one
probe at the target load, judged by the experiment's SLO. `replicas.py` says when a split of the
load is exactly one replica's probe; this measures it instead. The probe sends R x
search.num_requests requests, so each replica sees about as many as its capacity probe did over
the same time. A fleet that fails is tried once more with R + 1."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from harness.planner.replicas import replicas_needed
from harness.planner.search import Evaluation
from harness.planner.space import Candidate, Space, parallel_node
from harness.planner.tasks import ProbeSummary, run_rate_task
from harness.planner.units import unit_config
from harness.experiment import plan_experiment
from harness.search.probe import ProbeTask
from harness.settings.experiment import ExperimentConfig

ROUTER = "least_outstanding"


@dataclass(frozen=True)
class ReplicaCheck:
    replicas: int
    gpus: int
    qps: float
    requests: int
    probe: ProbeSummary

    @property
    def passed(self) -> bool:
        return self.probe.passed

    def line(self, criterion: str) -> str:
        p = self.probe
        measured = (f"attainment {p.goodput_fraction:.1%}" if criterion == "attainment"
                    else f"P99 TBT {p.tbt_s:.3f} s, median scheduling delay {p.scheduling_delay_s:.3f} s")
        return (f"checked: {'pass' if p.passed else 'FAIL'} at target ({self.replicas} replica{'s' if self.replicas > 1 else ''}, {self.gpus} GPUs, "
                f"{self.qps:g} QPS behind {ROUTER}, {self.requests} requests: {measured}"
                + ("" if p.passed else f"; {p.reason}") + ")")


def fleet_config(space: Space, c: Candidate, replicas: int) -> ExperimentConfig:
    """The experiment config of `replicas` copies of `c` as one simulated cluster."""
    base = space.config
    schedulers = {c.scheduler: space.grid[c.scheduler]}
    search = replace(base.search, num_requests=base.search.num_requests * replicas)
    if c.unit is not None:
        config = unit_config(base, c.unit, schedulers, copies=replicas)
    else:
        config = replace(base, parallel=parallel_node(c.tp, c.pp, c.dp), scheduler=schedulers,
                         cluster=replace(base.cluster, instances=replicas, replicas=[], prefill_instances=0,
                                         decode_instances=0))
    return replace(config, search=search, cluster=replace(config.cluster, router=ROUTER))


def check_winner(space: Space, win: Evaluation, target: float, log: Callable[[str], None]) -> list[ReplicaCheck]:
    """One probe of the winner's fleet at `target`; if it fails, one more with a replica more."""
    c = win.candidate
    replicas = replicas_needed(target, win.capacity_qps)
    out = []
    if c.dp > 1 and replicas > 1:  # the simulator runs one group of DP ranks, not a cluster of them
        log(f"  not checked: {replicas} replicas of {c.key} (DP ranks are simulated as one group only)")
        return out
    for r in (replicas, replicas + 1):
        plan = plan_experiment(fleet_config(space, c, r))
        log(f"  checking {r} replicas of {c.key} at {target:g} QPS ({plan.search.num_requests} requests)")
        out.append(ReplicaCheck(r, r * c.gpus, target, plan.search.num_requests,
                                run_rate_task(ProbeTask(plan, c.scheduler, target))))
        if out[-1].passed:
            break
    return out
