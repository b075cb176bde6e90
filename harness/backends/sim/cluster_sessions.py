"""Sessions on a cluster in the simulator: a later turn is released `think_s` after the turn
before it finished (on whichever instance ran it) and is routed at its release, so routing cannot
be planned ahead as `cluster.route_and_run` plans arrivals.

The instances advance conservatively, the one furthest behind first, never past the earliest
release pending nor (by more than its iteration in progress) past the next instance's clock: a
finish on any instance happens at or after that instance's clock, so every release is routed
seeing each instance at its first iteration boundary at or after the release, as `cluster.py`
routes an arrival. Each instance's records are those of a single engine given the same
arrivals; `sessions.SessionRelease` keeps the releases and the records (a turn never released
is recorded as not started).
"""
from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from collections.abc import Sequence as Seq

from engines.core import Engine
from engines.routers import Router
from harness.backends.sim.cluster import _Instance, add_instance_stats, choose, make_instances, route_requests
from harness.backends.sim.loop import IterationTimer, SessionRun
from harness.backends.sim.sessions import sim_sequence
from harness.records import RequestRecord, RequestSpec


class ClusterSessionRun(SessionRun):
    """A SessionRun whose releases are handed to a router (`pop_release`), not to one engine."""

    def pop_release(self) -> int:
        """The earliest pending release, given its rank (release order); returns the rank."""
        at, i = heapq.heappop(self.pending)
        rank = len(self.order)
        self.order.append(i)
        self.arrivals.append(at)
        self.release[i] = at
        self.seqs.append(sim_sequence(rank, self.requests[i], self.block_size))
        return rank


def _busy(inst: _Instance) -> bool:
    """It has something to do without a new arrival."""
    return bool(inst.queue) or (inst.engine.has_unfinished and not inst.stuck)


def simulate_cluster_sessions(
    requests: Seq[RequestSpec],
    engines: Seq[Engine],
    timers: Seq[IterationTimer],
    router: Router,
    *,
    pp: int | Seq[int] = 1,
    fast_forward: bool = True,
    time_limit_s: float | None = None,
    on_progress: Callable[[int], None] | None = None,
    stats: dict | None = None,
) -> list[RequestRecord]:
    """`cluster.simulate_cluster` for requests with sessions (RequestSpec.after)."""
    if any(k > 1 for k in ([pp] if isinstance(pp, int) else pp)):
        raise ValueError("sessions on a cluster are simulated with pp=1 instances only")
    run = ClusterSessionRun(requests, engines[0] if engines else None, on_progress, None)  # type: ignore[arg-type]
    insts = make_instances(run, engines, timers, fast_forward, pp)
    limit = math.inf if time_limit_s is None else float(time_limit_s)
    request_of = route_requests(run, engines[0].blocks.block_size) if getattr(router, "needs_request", False) else None
    stateful = getattr(router, "needs_state", True)
    while True:
        release = run.next_arrival
        active = [inst for inst in insts if _busy(inst)]
        lead = min(active, key=lambda inst: inst.t, default=None)
        if lead is not None and lead.t < min(release, limit):
            behind = min((inst.t for inst in active if inst is not lead), default=math.inf)
            stop = behind if behind > lead.t else math.nextafter(lead.t, math.inf)  # equal clocks: one step
            lead.advance(min(release, stop), limit, final=False)
            continue
        if release == math.inf or release > limit:
            break
        rank = run.pop_release()
        states = [inst.state(release) for inst in insts] if stateful else [None] * len(insts)
        insts[choose(router, insts, states, rank, request_of)].route(rank)  # type: ignore[arg-type]
    for inst in insts:
        inst.advance(math.inf, limit, final=True)
    if stats is not None:
        add_instance_stats(stats, insts)
    return run.records()
