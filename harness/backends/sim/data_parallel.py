"""Data-parallel ranks in lockstep: vLLM's --data-parallel-size N --enable-expert-parallel.

Each rank is a cluster instance (cluster.py: its own engine, scheduler and KV pool, the requests
routed to it), and requests are routed at arrival as vLLM's API server does (engines.routers
`vllm_dp`, or the cluster's router). Unlike a cluster's instances the ranks share one clock: every
step, each rank with work schedules a batch, a rank without one runs the dummy batch, and the step
takes `timer.step_time(batches)` on every rank (the slowest rank's own work plus the MoE layers'
shared time: engines.perf.expert_parallel, which cites vLLM's DPEngineCoreProc busy loop). When no
rank has work the ranks wait for the next arrival together (vLLM's wave ends).

A request arriving during a step is routed when the step ends (the engine sees it then anyway);
the router sees each rank's requests outstanding at that boundary. Steps are stepped one by one
(no fast-forward: a decode run on one rank ends whenever another rank's batch changes).
"""
from __future__ import annotations

from collections.abc import Sequence as Seq

import numpy as np

from engines.core import Engine
from engines.routers import Router, make_router
from engines.schedulers import EngineConfig, make_engine
from harness.backends.sim.cluster import add_instance_stats, make_instances
from harness.backends.sim.loop import SimRun
from harness.records import RequestRecord, RequestSpec


def simulate_vllm_dp(
    requests: Seq[RequestSpec],
    configs: Seq[EngineConfig],
    timer,
    *,
    time_limit_s: float | None = None,
    stats: dict | None = None,
) -> list[RequestRecord]:
    """vLLM's data-parallel deployment: one engine core per rank, built from that rank's config (its
    own scheduler limits and KV pool), behind the API server's DP balancing (engines.routers `vllm_dp`).
    The sim backend and `validate`'s replay both run DP ranks through here."""
    engines = [make_engine(c) for c in configs]
    return simulate_data_parallel(requests, engines, timer, make_router("vllm_dp"), time_limit_s=time_limit_s,
                                  stats=stats)


def simulate_data_parallel(
    requests: Seq[RequestSpec],
    engines: Seq[Engine],
    timer,
    router: Router,
    *,
    time_limit_s: float | None = None,
    stats: dict | None = None,
) -> list[RequestRecord]:
    """Run `requests` over DP ranks `engines` stepping together, each step priced by
    `timer.step_time([(new_tokens, context_lens) or None per rank])`; one record per request, input order.
    `stats` receives `instance_requests` (requests each rank got), `steps` and `dummy_batches`."""
    run = SimRun(requests, engines[0], None)
    ranks = make_instances(run, engines, [timer] * len(engines), False, 1)
    limit = np.inf if time_limit_s is None else float(time_limit_s)
    arrivals = run.arrivals.tolist()
    routed, t, steps, dummies = 0, 0.0, 0, 0
    while t < limit:
        while routed < len(arrivals) and arrivals[routed] <= t:  # in arrival order, as the API server sees them
            ranks[router.choose([r.state(t) for r in ranks])].route(routed)
            routed += 1
        for r in ranks:
            r.admit_arrivals(t)
        batches = [r.engine.schedule() if r.engine.has_unfinished else None for r in ranks]
        if all(b is None for b in batches):
            if routed == len(arrivals):
                if any(r.engine.has_unfinished for r in ranks):
                    raise next(r for r in ranks if r.engine.has_unfinished).stalled(t)
                break
            t = arrivals[routed]  # every rank idle (or blocked) until the next request arrives
            continue
        for b in batches:
            if b is not None:
                run.started(b, t)
        t_end = t + timer.step_time([None if b is None else (b.new_tokens, b.context_lens) for b in batches])
        for r, b in zip(ranks, batches):
            if b is not None:
                out = r.engine.complete(b)
                run.line.tokens_at(out.produced, t_end)
                r.finished(out.finished, t_end)
        steps += 1
        dummies += sum(b is None for b in batches)
        t = t_end
    if stats is not None:
        add_instance_stats(stats, ranks)
        stats.update(steps=steps, dummy_batches=dummies)
    return run.records()
