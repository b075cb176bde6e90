"""An autoscaled fleet in the simulator: replicas started and drained during the run.

The run starts with `plan.initial` replicas serving. Every `interval_s` the fleet is advanced to
the decision time (each replica to its first iteration boundary at or after it, as before a
routing decision: cluster.py), its signals are read, and the policy (engines.routers.autoscale,
the code a live router could share) says how many replicas it should have. A new replica holds
its GPUs at once and serves from `cold_start_s` later (its weights loaded): the router never sees
it before. A replica told to drain is taken out of routing at once; what it holds runs to the end
and it is retired when its last request finishes. Arrivals are routed, as in a fixed cluster,
among the replicas serving at their arrival; every replica's records are exactly a single
engine's of what was routed to it. Decisions go on after the last arrival while any replica has
work, so the fleet's GPU-hours include its drain.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from collections.abc import Sequence as Seq

import numpy as np

from engines.core import Engine
from engines.routers import RouteRequest, Router
from engines.routers.autoscale import ScaleSignals, desired_replicas, drain_choice, signal_of
from harness.backends.scaling import ScalePlan
from harness.backends.sim.cluster import (ClusterSessionRun, add_instance_stats, choose, make_instances, route_requests,
                                          run_sessions)
from harness.backends.sim.loop import IterationTimer, SimRun
from harness.backends.sim.sessions import has_sessions
from harness.backends.sim.scale_metrics import ReplicaLife, Tick, attainment_between, report, slo_samples, windows
from harness.records import RequestRecord, RequestSpec

NewReplica = Callable[[], tuple[Engine, IterationTimer]]


class _Replica:
    def __init__(self, inst, started_s: float, ready_s: float) -> None:
        self.inst, self.started_s, self.ready_s, self.drain_s = inst, started_s, ready_s, math.inf
        self.first_request_s = self.last_request_s = math.nan  # arrivals of the first and last request routed to it

    def serving(self, t: float) -> bool:
        return self.ready_s <= t and self.drain_s > t


class _Fleet:
    def __init__(self, run: SimRun, new_replica: NewReplica, plan: ScalePlan, pp: int, fast_forward: bool,
                 limit: float) -> None:
        self.run, self.new_replica, self.plan, self.pp, self.ff, self.limit = run, new_replica, plan, pp, fast_forward, limit
        self.replicas: list[_Replica] = []
        self.ticks: list[Tick] = []
        self.recent: list[int] = []  # ranks whose SLO samples may still fall in a window to come (policy slo)

    def start(self, at: float, ready: float, made: tuple[Engine, IterationTimer] | None = None) -> None:
        engine, timer = made if made is not None else self.new_replica()
        inst = make_instances(self.run, [engine], [timer], self.ff, self.pp)[0]
        inst.instance_id = len(self.replicas)  # who it is for a router keyed by replica (session affinity's ring)
        self.replicas.append(_Replica(inst, at, ready))

    def advance(self, t: float) -> None:
        for r in self.replicas:
            if r.drain_s == math.inf or r.inst.busy():
                r.inst.advance(t, self.limit, final=False)

    def serving(self, t: float) -> list[_Replica]:
        return [r for r in self.replicas if r.serving(t)]

    def routed(self, r: _Replica, rank: int, t: float) -> None:
        r.last_request_s = t
        if r.first_request_s != r.first_request_s:
            r.first_request_s = t
        if self.plan.rule.name == "slo":
            self.recent.append(rank)

    def decide(self, t: float) -> None:
        """One decision at `t` (the fleet advanced to it first)."""
        self.advance(t)
        plan = self.plan
        serving = self.serving(t)
        warming = [r for r in self.replicas if r.started_s <= t < r.ready_s]
        states = [r.inst.state(t) for r in serving]
        draining = sum(1 for r in self.replicas if r.drain_s <= t and r.inst.busy())
        signals = ScaleSignals(len(serving), len(warming), sum(s.outstanding for s in states),
                               float(np.mean([s.kv_used_fraction for s in states])) if states else 0.0,
                               self._attainment(t) if plan.rule.name == "slo" else None)
        want = desired_replicas(plan.rule, signals)
        self.ticks.append(Tick(t, len(serving), len(warming), draining, signal_of(plan.rule, signals), want))
        for _ in range(want - len(serving) - len(warming)):
            self.start(t, t + plan.cold_start_s)
        for _ in range(len(serving) + len(warming) - want):
            left = [r for r in serving if r.drain_s > t]
            left[drain_choice([r.inst.state(t).outstanding for r in left])].drain_s = t

    def _attainment(self, t: float) -> float | None:
        """The share of SLO samples met in (t - window_s, t] (policy slo)."""
        plan, line, arrivals = self.plan, self.run.line, self.run.arrivals
        lo = t - plan.window_s
        samples, keep = [], []
        for rank in self.recent:
            tokens = line.token_times(rank)
            times, met = slo_samples(float(arrivals[rank]), tokens, plan.tbt_s, plan.ttft_s)
            samples.append((times, met))
            if not line.finished[rank] <= lo:  # NaN (running) or finished inside the window
                keep.append(rank)
        self.recent = keep
        return attainment_between(samples, lo, t)

    def lives(self, end_s: float) -> list[ReplicaLife]:
        out = []
        for r in self.replicas:
            end = end_s
            if r.drain_s < math.inf:
                done = r.inst.finish_times
                end = min(end_s, max(r.drain_s, done[-1] if done else r.drain_s))
            out.append(ReplicaLife(r.started_s, r.ready_s, r.drain_s, end, r.inst.routed, r.first_request_s,
                                   r.last_request_s))
        return out


def simulate_autoscaled(requests: Seq[RequestSpec], new_replica: NewReplica, router: Router, plan: ScalePlan, *,
                        pp: int = 1, fast_forward: bool = True, time_limit_s: float | None = None,
                        stats: dict | None = None) -> list[RequestRecord]:
    """Run `requests` through a fleet scaled by `plan` behind `router`; one record per request,
    input order. `new_replica()` builds a replica's engine and timer. `stats`, if given, receives
    what a cluster's run gives (instance_requests, ...) and `autoscale` (scale_metrics.report)."""
    engine, timer = new_replica()
    sessions = has_sessions(requests)
    if sessions and pp > 1:
        raise ValueError("sessions on a scaled fleet are simulated with pp=1 replicas only")
    run = ClusterSessionRun(requests, engine, None, None) if sessions else SimRun(requests, engine, None)
    limit = math.inf if time_limit_s is None else float(time_limit_s)
    fleet = _Fleet(run, new_replica, plan, pp, fast_forward, limit)
    fleet.start(0.0, 0.0, (engine, timer))
    for _ in range(plan.initial - 1):
        fleet.start(0.0, 0.0)
    # what a router that reads the request sees of it (its session, its prompt's block hashes)
    request_of = route_requests(run, engine.blocks.block_size) if getattr(router, "needs_request", False) else None
    if sessions:  # turns released by answers: routed as released, decisions between them
        run_sessions(run, [r.inst for r in fleet.replicas], router, limit, request_of, _SessionFleet(fleet))  # type: ignore[arg-type]
    else:
        _route_arrivals(run, fleet, router, plan, limit, request_of)
    records = run.records()
    # The run's end: its last finish, or the time limit if a request did not finish by then (only a
    # limit leaves a request unfinished).
    finished = run.line.finished
    last = float(run.arrivals[-1]) if len(run.arrivals) else 0.0
    end_s = limit if np.isnan(finished).any() else max(last, float(np.max(finished))) if len(finished) else last
    if stats is not None:
        add_instance_stats(stats, [r.inst for r in fleet.replicas], router=router)
        lives = fleet.lives(end_s)
        samples = [slo_samples(r.arrival_s, np.asarray(r.token_times_s), plan.tbt_s, plan.ttft_s) for r in records]
        rows = windows(lives, fleet.ticks, samples, plan.interval_s, end_s, plan.gpus_per_replica, plan.gpu_hour_usd)
        stats["autoscale"] = report(lives, fleet.ticks, rows, plan, end_s)
    return records


def _route_arrivals(run: SimRun, fleet: _Fleet, router: Router, plan: ScalePlan, limit: float,
                    request_of: Callable[[int], RouteRequest] | None) -> None:
    """Arrivals known in advance: each routed among the replicas serving at its time, the
    decisions due before it taken first; decisions go on after the last while any replica has work."""
    tick = plan.interval_s
    for rank, t in enumerate(run.arrivals.tolist()):
        while tick <= t and tick <= limit:
            fleet.decide(tick)
            tick += plan.interval_s
        if t > limit:
            break
        serving = fleet.serving(t)
        if getattr(router, "needs_state", True):
            fleet.advance(t)
            states = [r.inst.state(t) for r in serving]
        else:
            states = [None] * len(serving)
        k = choose(router, [r.inst for r in serving], states, rank, request_of)  # type: ignore[arg-type]
        serving[k].inst.route(rank)
        fleet.routed(serving[k], rank, t)
    while tick <= limit:  # decisions go on after the last arrival while any replica has work
        fleet.advance(tick)
        if not any(r.inst.busy() for r in fleet.replicas):
            break
        fleet.decide(tick)
        tick += plan.interval_s
    for r in fleet.replicas:
        r.inst.advance(math.inf, limit, final=True)


class _SessionFleet:
    """The fleet as cluster.run_sessions drives it (cluster.SessionFleet): a decision every
    interval, releases routed among the replicas serving at their time."""

    def __init__(self, fleet: _Fleet) -> None:
        self.fleet, self.next_tick = fleet, fleet.plan.interval_s

    def tick(self, t: float):
        before = len(self.fleet.replicas)
        self.fleet.decide(t)
        self.next_tick = t + self.fleet.plan.interval_s
        return [r.inst for r in self.fleet.replicas[before:]]

    def routable(self, t: float) -> list[int]:
        return [k for k, r in enumerate(self.fleet.replicas) if r.serving(t)]

    def routed(self, k: int, rank: int, t: float) -> None:
        self.fleet.routed(self.fleet.replicas[k], rank, t)
