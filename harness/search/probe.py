"""Probes: one rate's requests sent through a backend and judged against the SLO, and the
capacity search built from them. The search sees only a function that runs requests: it knows no
backend by name, and the backends never call back into it. With search.workers > 1 the search
runs in rounds (harness.search.rounds), each round's probes at once through an executor
(harness.search.executor), each in a worker that opens its own backend of the plan."""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from common.errors import HarnessError, RunBroken
from harness.backends import open_backend
from harness.backends.base import BackendRun
from harness.metrics import Slo, SloVerdict, Summary, TokenGaps, check_slo, summarize
from harness.records import CUT_OFF_KINDS, STOPPED_EARLY, RequestRecord, RequestSpec, error_kind
from harness.results.store import records_frame
from harness.search.capacity import CapacityResult, Probe, find_capacity
from harness.search.executor import LocalProcessPool, ProbeExecutor
from harness.experiment import ExperimentPlan, check_workers
from harness.search.rounds import Round, SearchBounds, find_capacity_rounds
from harness.workload import requests_at_rate

if TYPE_CHECKING:
    from harness.search.cache import ProbeCache

RunRequests = Callable[[Sequence[RequestSpec], str], BackendRun]  # a backend's run(requests, label)


@dataclass(frozen=True)
class ProbeOutcome:
    qps: float
    seed: int
    verdict: SloVerdict
    summary: Summary
    requests: pd.DataFrame = field(repr=False)  # one row per request (harness.results.store.records_frame)
    records: list[RequestRecord] | None = field(repr=False)  # None when loaded from the probe cache
    notes: tuple[str, ...] = ()  # what the backend said of the probe (a server that sent no usage, ...)
    scaling: dict | None = field(default=None, repr=False)  # an autoscaled fleet's report (cluster.autoscale)


def probe_requests(plan: ExperimentPlan, qps: float) -> list[RequestSpec]:
    """The requests of one probe: the plan's lengths with arrivals at `qps` (any backend)."""
    if not qps > 0 or not np.isfinite(qps):
        raise HarnessError(f"QPS must be a positive number, got {qps}")
    return requests_at_rate(plan.workload, plan.arrival, qps, plan.seed)


def probe_outcome(plan: ExperimentPlan, scheduler: str, qps: float, records: list[RequestRecord]) -> ProbeOutcome:
    """A probe's verdict, summary and per-request rows from its records (any backend)."""
    gaps = TokenGaps.of(records)  # taken once for the three
    frame = records_frame(records, gaps, scheduler=scheduler, seed=plan.seed, qps=qps)
    return ProbeOutcome(qps, plan.seed, judge(plan, records, gaps), summarize(records, gaps), frame, records)


def judge(plan: ExperimentPlan, records: list[RequestRecord], gaps: TokenGaps | None = None) -> SloVerdict:
    """A probe's verdict by the plan's SLO: the one part of its outcome the SLO decides."""
    verdict = check_slo(records, plan.slo, gaps)
    if any(r.error == STOPPED_EARLY for r in records):  # its latencies are of the part that ran
        verdict = replace(verdict, reason=f"{verdict.reason} (stopped early: the failure was certain)")
    return verdict


class SharedProbes:
    """Probes' outcomes kept for runs that simulate the same thing and differ in how it is judged
    (harness.commands.jobs groups such configs: the same but for their SLO and name, and the SLO
    reaching no simulation). A probe's records, and so its summary and per-request rows, do not
    depend on the SLO; only its verdict does, judged again per run (`judge`), so a kept outcome
    gives each run its own exact one. Keyed by (scheduler, its settings, seed, rate): whoever opens
    it vouches that every run inside simulates alike but for its schedulers' own settings, which it
    states in `settings` (by scheduler name) before each run."""

    def __init__(self) -> None:
        self.outcomes: dict[tuple[str, str, int, float], ProbeOutcome] = {}
        self.settings: dict[str, str] = {}
        self.hits = 0


_shared: SharedProbes | None = None  # set by `shared_probes`, within one process (one job) only


@contextmanager
def shared_probes() -> Iterator[SharedProbes]:
    """Within it, run_probe keeps every probe's outcome and gives a repeated (scheduler, seed, rate) the
    kept outcome instead of simulating it again (SharedProbes). They are held until it closes."""
    global _shared
    _shared = SharedProbes()
    try:
        yield _shared
    finally:
        _shared = None


def run_probe(plan: ExperimentPlan, scheduler: str, qps: float, run: RunRequests) -> ProbeOutcome:
    """One probe at `qps` through a backend's `run` (or its kept outcome judged by this plan's SLO,
    inside `shared_probes`: the summary and rows are the kept ones, the same whatever the SLO)."""
    shared = _shared
    key = (scheduler, shared.settings.get(scheduler, ""), plan.seed, qps) if shared is not None else None
    kept = shared.outcomes.get(key) if shared is not None else None  # type: ignore[arg-type]
    if kept is not None:
        shared.hits += 1  # type: ignore[union-attr]
        return replace(kept, verdict=judge(plan, kept.records))  # type: ignore[arg-type]
    out = run(probe_requests(plan, qps), f"{scheduler} @ {qps:.3g} QPS")
    notes = tuple(out.diagnostics.get("notes") or ())
    outcome = replace(probe_outcome(plan, scheduler, qps, out.records), notes=notes, scaling=out.diagnostics.get("autoscale"))
    if shared is not None:
        shared.outcomes[key] = outcome  # type: ignore[index]
    return outcome


def failed_on_errors_only(outcome: ProbeOutcome, slo: Slo) -> bool:
    """Did the probe fail on its failed requests alone? Judged without them (and without what an
    early stop cut off) it would pass: the server answered wrongly, not slowly."""
    v = outcome.verdict
    if v.passed or not v.num_errors or outcome.records is None:
        return False
    rest = [r for r in outcome.records
            if r.error is None or (error_kind(r.error) in CUT_OFF_KINDS and r.error != STOPPED_EARLY)]
    return not rest or check_slo(rest, replace(slo, max_error_fraction=1.0)).passed


class SearchBroken(RunBroken):
    """A search stopped by RunBroken (its message is the cause's), with the probes it had finished:
    measured, and kept by whoever saves the run, but no capacity."""

    def __init__(self, message: str, probes: tuple[Probe, ...] = ()) -> None:
        super().__init__(message)
        self.probes = probes


ERRORS_ONLY_TO_GIVE_UP = 2  # failing probes in a row, nothing passed: halving the rate again would not help


class _WrongAnswers:
    """Watches a search's probes: a server that answers wrongly (probes fail on their failed
    requests, not on latency) at the start rate and at half of it, with nothing passed, breaks
    the run at once (lower rates would only take longer to fail alike), and a search whose every
    probe failed so breaks it at its end: none of it is a capacity."""

    def __init__(self, plan: ExperimentPlan, scheduler: str) -> None:
        self.plan, self.scheduler = plan, scheduler
        self.probes: list[Probe] = []

    def seen(self, p: Probe) -> None:
        self.probes.append(p)
        if any(q.passed for q in self.probes):
            return
        streak = self.probes[-ERRORS_ONLY_TO_GIVE_UP:]
        if len(streak) == ERRORS_ONLY_TO_GIVE_UP and all(failed_on_errors_only(q.detail, self.plan.slo) for q in streak):
            raise self.broken()

    def check(self, result: CapacityResult) -> None:
        probes = result.probes
        if probes and not any(p.passed for p in probes) and all(failed_on_errors_only(p.detail, self.plan.slo)
                                                                for p in probes):
            self.probes = list(probes)
            raise self.broken()

    def broken(self) -> SearchBroken:
        where = getattr(self.plan.backend, "base_url", "") or "the server"
        errors: dict[str, int] = {}
        for p in self.probes:
            for kind, n in p.detail.verdict.errors.items():
                errors[kind] = errors.get(kind, 0) + n
        first = next(r.error for p in self.probes for r in p.detail.records
                     if r.error is not None and error_kind(r.error) not in CUT_OFF_KINDS)
        rates = ", ".join(f"{p.qps:.4g}" for p in self.probes)
        kinds = ", ".join(f"{n} {k}" for k, n in sorted(errors.items()))
        return SearchBroken(f"{where} answers wrongly, not slowly: every probe of {self.scheduler} ({rates} QPS) failed on "
                         f"its failed requests, not on latency ({kinds}; the first: {first}); no capacity can be "
                         f"measured (search.max_error_fraction={self.plan.search.max_error_fraction:g}: raise it to "
                         f"accept such failures)", tuple(self.probes))


@dataclass(frozen=True)
class ProbeTask:
    """One probe to run in a worker process (picklable: the plan, not a backend)."""

    plan: ExperimentPlan
    scheduler: str
    qps: float


def run_probe_task(task: ProbeTask) -> ProbeOutcome:
    """A probe in a worker: its own backend of the plan (deterministic backends only, so this is
    the probe the caller's backend would have run)."""
    with open_backend(task.plan.job(task.scheduler, progress=False)) as backend:
        return run_probe(task.plan, task.scheduler, task.qps, backend.run)


def search_capacity(
    plan: ExperimentPlan, scheduler: str, run: RunRequests, on_probe: Callable[[Probe], None] | None = None,
    cache: ProbeCache | None = None, executor: ProbeExecutor | None = None,
    on_round: Callable[[Round], None] | None = None,
) -> CapacityResult:
    """The capacity search for one scheduler (or its one probe at search.fixed_qps), each probe
    through `run`; probes found in `cache` are not run again. With search.workers = W > 1 each
    round runs up to W probes at once in `executor`'s workers (a local process pool of W when
    None), not through `run`; the answer is the serial search's (harness.search.rounds).
    A search whose probes fail on their failed requests alone (the server answers wrongly, not
    slowly: `failed_on_errors_only`), at its first rate and at half of it, or at every rate it
    tried, raises RunBroken naming the fault: none of it is a capacity."""

    def probe(qps: float) -> Probe:
        outcome = cache.load(scheduler, plan.seed, qps) if cache is not None else None
        if outcome is None:
            outcome = run_probe(plan, scheduler, qps, run)
            if cache is not None:
                cache.save(scheduler, outcome)
        return Probe(qps, outcome.verdict.passed, outcome)

    wrong = _WrongAnswers(plan, scheduler)

    def seen(p: Probe) -> None:
        if on_probe is not None:
            on_probe(p)
        wrong.seen(p)

    s = plan.search
    try:
        if s.fixed_qps is not None:
            p = probe(s.fixed_qps)
            seen(p)
            result = CapacityResult(s.fixed_qps if p.passed else 0.0, float("inf") if p.passed else s.fixed_qps, (p,))
        elif s.workers == 1:
            result = find_capacity(probe, s.start_qps, s.rel_tol, s.min_qps, s.max_qps, on_probe=seen, growth=s.growth)
        else:
            check_workers(s, plan.backend.name)
            bounds = SearchBounds(s.start_qps, s.rel_tol, s.min_qps, s.max_qps, s.growth)
            with nullcontext(executor) if executor is not None else LocalProcessPool(s.workers) as pool:  # ours: closed
                result = find_capacity_rounds(lambda rates: _probe_round(plan, scheduler, rates, cache, pool),
                                              s.workers, bounds, on_probe=seen, on_round=on_round)
        wrong.check(result)
    except SearchBroken:
        raise
    except RunBroken as e:  # the backend broke (server gone, client lag): the probes finished before go with it
        raise SearchBroken(str(e), tuple(wrong.probes)) from e
    return result


def _probe_round(plan: ExperimentPlan, scheduler: str, rates, cache: ProbeCache | None,
                 pool: ProbeExecutor) -> Iterator[Probe]:
    """One round: cached probes first (from disk, not run), the others at once in `pool`, each
    cached as soon as it finishes (an interrupted round keeps what finished)."""
    todo = []
    for qps in rates:
        outcome = cache.load(scheduler, plan.seed, qps) if cache is not None else None
        if outcome is None:
            todo.append(qps)
        else:
            yield Probe(qps, outcome.verdict.passed, outcome)
    if not todo:
        return
    finished = pool.map_unordered(run_probe_task, [ProbeTask(plan, scheduler, qps) for qps in todo])
    try:
        for i, outcome in finished:
            if cache is not None:
                cache.save(scheduler, outcome)
            yield Probe(todo[i], outcome.verdict.passed, outcome)
    finally:
        close = getattr(finished, "close", None)
        if close is not None:  # left early: the executor cancels what has not started
            close()

