"""Offline throughput runs: every request of the workload sent once, no capacity search, no SLO.

An experiment whose arrival process is rate-free (closed_loop: `concurrency` requests in flight,
a finished one replaced by the next; at_once: every request waiting at t = 0) is one: the rate a
capacity search would vary does not exist. Each scheduler's requests go through its backend's
`run`, like a probe's, with the iteration log asked for; the figures of merit are
harness/throughput.py's (throughput, completion time, composition, decode cost, bubbles, the
gain over `offline.baseline`). Any backend serves it: the simulator keeps the closed loop and the
log, a live server the closed loop (its load generator), without a log.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import pandas as pd

from common.errors import RunBroken
from harness.backends.base import BackendRun
from harness.records import RequestRecord
from harness.results.store import records_frame
from harness.throughput import OfflineSummary, offline_summary
from harness.workload import arrival_offsets, make_requests


@dataclass(frozen=True)
class OfflineOutcome:
    scheduler: str
    summary: OfflineSummary
    requests: pd.DataFrame = field(repr=False)  # records_frame + bubble seconds by cause
    iterations: pd.DataFrame | None = field(repr=False)  # the iteration log, when the backend keeps one
    records: list[RequestRecord] = field(repr=False)


def run_offline(plan, scheduler: str, open_backend, progress: bool = True) -> OfflineOutcome:
    """`scheduler`'s offline run through a backend opened by `open_backend(job)`."""
    job = replace(plan.job(scheduler, progress=progress), iteration_log=True)
    # every request of the plan's workload, arrivals from its rate-free process
    requests = make_requests(plan.workload, arrival_offsets(plan.arrival, None, plan.search.num_requests, plan.seed))
    with open_backend(job) as backend:
        out: BackendRun = backend.run(requests, f"{scheduler} offline")
    iterations, bubbles = out.diagnostics.get("iterations"), out.diagnostics.get("request_bubbles")
    if out.records and any(r.error for r in out.records):
        bad = next(r for r in out.records if r.error)
        raise RunBroken(f"{scheduler}: {sum(1 for r in out.records if r.error)} requests failed in the offline run "
                        f"(first: {bad.error}); its throughput would be of the rest")
    frame = records_frame(out.records, scheduler=scheduler, seed=plan.seed)
    for name, values in (bubbles or {}).items():
        frame[name] = values
    log = pd.DataFrame(iterations).assign(scheduler=scheduler) if iterations is not None else None
    return OfflineOutcome(scheduler, offline_summary(out.records, iterations, bubbles), frame, log, out.records)
