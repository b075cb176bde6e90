"""The work a plan sends to its executor's workers: one configuration's capacity search (or one
probe), each in a worker that opens its own backend of the planned experiment (the simulator:
deterministic, so a worker's answer is the one the caller would get). Tasks and answers are
small and picklable: a plan, not a backend, goes out; verdicts and a few quantiles come back,
never the records."""
from __future__ import annotations

import time
from dataclasses import dataclass

from harness.backends import open_backend
from harness.search.capacity import Probe, find_capacity
from harness.experiment import ExperimentPlan
from harness.search.probe import ProbeOutcome, ProbeTask, run_probe, run_probe_task
from harness.starvation import starvation


@dataclass(frozen=True)
class ProbeSummary:
    qps: float
    passed: bool
    reason: str
    tbt_s: float  # the SLO's TBT quantile (P99)
    scheduling_delay_s: float  # the SLO's scheduling-delay quantile (median)
    ttft_p50_s: float
    ttft_p99_s: float
    output_token_throughput: float
    goodput_fraction: float = float("nan")  # the share of requests within the SLO (DistServe's attainment)
    request_throughput: float = float("nan")  # completed requests per second (harness.starvation)

    @property
    def starvation(self) -> str:
        """Its signs of starvation if it passed (harness.starvation), "" if none."""
        return starvation(self.passed, self.qps, self.request_throughput, self.ttft_p99_s)


def summarize_probe(o: ProbeOutcome) -> ProbeSummary:
    v, s = o.verdict, o.summary
    return ProbeSummary(o.qps, v.passed, v.reason, v.tbt_s, v.scheduling_delay_s, s.ttft.p50, s.ttft.p99,
                        s.output_token_throughput, v.goodput_fraction, s.request_throughput)


@dataclass(frozen=True)
class SearchTask:
    """One configuration's capacity search: bracket from `start_qps` by `growth` (a warm start
    steps by little), never below `min_qps` (a rate it must pass to stay in the running: failing
    there ends the search with capacity 0) nor above `max_qps` (its upper bound)."""

    plan: ExperimentPlan
    scheduler: str
    start_qps: float
    min_qps: float
    max_qps: float
    rel_tol: float
    growth: float = 2.0


@dataclass(frozen=True)
class SearchAnswer:
    capacity_qps: float  # 0: failed at min_qps (or nothing passed)
    lowest_failing_qps: float
    probes: tuple[ProbeSummary, ...]
    seconds: float  # wall time in the worker

    @property
    def at_capacity(self) -> ProbeSummary | None:
        return next((p for p in self.probes if p.passed and p.qps == self.capacity_qps), None)


def run_search_task(task: SearchTask) -> SearchAnswer:
    t0 = time.perf_counter()
    summaries: list[ProbeSummary] = []
    with open_backend(task.plan.job(task.scheduler, progress=False)) as backend:
        def probe(qps: float) -> Probe:
            s = summarize_probe(run_probe(task.plan, task.scheduler, qps, backend.run))
            summaries.append(s)
            return Probe(qps, s.passed)

        result = find_capacity(probe, task.start_qps, task.rel_tol, task.min_qps, task.max_qps, growth=task.growth)
    return SearchAnswer(result.capacity_qps, result.lowest_failing_qps, tuple(summaries), time.perf_counter() - t0)


def run_rate_task(task: ProbeTask) -> ProbeSummary:
    """One probe at a fixed rate (a replica's share of the target load), summarized in the worker."""
    return summarize_probe(run_probe_task(task))
