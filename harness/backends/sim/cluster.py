"""A cluster in the simulator: N engine instances on one virtual clock behind a router.

Each instance has its own engine (scheduler and KV pool) and its own iteration timeline; an
arrival is routed at its arrival time to one instance (`engines.routers`), from what the router
can see then: each instance's requests outstanding (routed, not finished by the arrival) and its
KV blocks in use as of its first iteration boundary at or after the arrival (the moment the
request can join it). Before each routing decision every instance is advanced to that arrival
with the single-engine loop's own stepper (`stepping.step_until`), so an
instance's records are exactly those of a single-engine run of the requests routed to it
(tests/test_sim_cluster.py). A router that ignores state (round robin) is applied up front and
each instance then runs once to the end. A pipeline-parallel instance runs `pipeline.Pipeline`
resumably, the instance standing in for the run it reads arrivals from.

Sessions (requests with `after`): a later turn is released `think_s` after the turn before it
finished (on whichever instance ran it) and is routed at its release, so routing cannot be planned
ahead. The instances then advance conservatively, the one furthest behind first, never past the
earliest release pending nor (by more than its iteration in progress) past the earliest release
any other instance could still make (`_release_bound`: its clock, plus its requests' remaining
output tokens at the cheapest iteration, plus their next turns' think times), so every release is
routed seeing each instance at its first iteration boundary at or after the release, as an
arrival is (a run without that lookahead gives the same records, tests/test_cache_routing.py). `sessions.SessionRelease` keeps the releases and the records (a turn never released
is recorded as not started).
"""
from __future__ import annotations

import dataclasses
import math
from bisect import bisect_right, insort
from collections import deque
from collections.abc import Callable, Iterable
from collections.abc import Sequence as Seq
from typing import Protocol

import numpy as np

from engines.core import Engine
from engines.routers import InstanceState, RouteRequest, Router
from harness.backends.sim.keyed_heap import KeyedHeap
from harness.backends.sim.loop import IterationTimer, SessionRun, SimRun, stalled_error, step_until
from harness.backends.sim.timer import fast_timer
from harness.backends.sim.pipeline import Pipeline
from harness.backends.sim.sessions import has_sessions, sim_sequence
from harness.records import RequestRecord, RequestSpec, session_keys


class _Instance:
    """One engine of the cluster: the ranks routed to it, its clock, its finishes."""

    def __init__(self, run: SimRun, engine: Engine, timer: IterationTimer, fast_forward: bool, pp: int = 1) -> None:
        timer = fast_timer(timer)
        self.run, self.engine, self.timer, self.fast_forward = run, engine, timer, fast_forward
        self.queue: deque[int] = deque()  # routed ranks not yet given to the engine, in arrival order
        self.routed = 0
        self.finish_times: list[float] = []  # non-decreasing
        self.t = 0.0
        self.stuck = False  # schedule() returned nothing at self.t and nothing changed since
        self.pipe = Pipeline(self, timer, pp, fast_forward, np.inf) if pp > 1 else None  # type: ignore[arg-type]
        self.halt: Callable[[], bool] | None = None  # read by stepping.step_until (sessions: see simulate_cluster_sessions)
        self.instance_id: int | None = None  # in a fleet that changes (autoscale.py): its start order

    # -- what Pipeline and stepping.step_until read of its run -----------------------------------
    @property
    def line(self):
        return self.run.line

    @property
    def watch(self):
        """The cluster's one give-up watch (search.stop_early), None without: every instance stops once it is certain."""
        return self.run.watch

    def admit_arrivals(self, t: float) -> None:
        arrivals, seqs, queue = self.run.arrivals, self.run.seqs, self.queue
        while queue and arrivals[queue[0]] <= t:
            self.engine.add(seqs[queue.popleft()])

    def started(self, batch, t: float) -> None:
        self.run.started(batch, t)

    def finished(self, seqs, t: float) -> None:
        self.finish_times.extend([t] * len(seqs))
        self.run.finished(seqs, t)

    def stalled(self, t: float) -> RuntimeError:
        return stalled_error(self.engine, t)

    @property
    def next_arrival(self) -> float:
        return float(self.run.arrivals[self.queue[0]]) if self.queue else np.inf

    def route(self, rank: int) -> None:
        """Queue `rank` by its arrival here (a KV transfer may land before one routed earlier)."""
        arrivals, queue = self.run.arrivals, self.queue
        if queue and arrivals[rank] < arrivals[queue[-1]]:
            insort(queue, rank, key=lambda r: (arrivals[r], r))
        else:
            queue.append(rank)
        self.routed += 1

    def busy(self) -> bool:
        """It has something to do without a new arrival."""
        return bool(self.queue) or (self.engine.has_unfinished and not self.stuck)

    def state(self, t: float) -> InstanceState:
        done = bisect_right(self.finish_times, t)
        blocks = self.engine.blocks
        return InstanceState(self.routed - done, blocks.num_used, blocks.num_blocks, instance_id=self.instance_id)

    def advance(self, until: float, limit: float, final: bool) -> None:
        """Step as a single-engine run does (`stepping.step_until`) until the first iteration boundary
        at or after min(until, limit), or until idle with nothing routed to come (resumable)."""
        stop = min(until, limit)
        if self.pipe is not None:
            self.pipe.limit, self.pipe.pause = stop, (np.inf if final else until)
            self.pipe.run()
            return
        self.t, self.stuck = step_until(self, self.timer, self.fast_forward, self.t, stop, final=final, stuck=self.stuck)


def make_instances(run: SimRun, engines: Seq[Engine], timers: Seq[IterationTimer], fast_forward: bool,
                   pp: int | Seq[int]) -> list[_Instance]:
    """One instance per engine; `pp`: every instance's pipeline stages, or each one's."""
    if not engines or len(engines) != len(timers):
        raise ValueError(f"a cluster needs one timer per engine and at least one engine, got {len(engines)}, {len(timers)}")
    stages = [pp] * len(engines) if isinstance(pp, int) else list(pp)
    if len(stages) != len(engines):
        raise ValueError(f"a cluster needs one pipeline depth per engine, got {len(stages)} for {len(engines)}")
    return [_Instance(run, e, tm, fast_forward, k) for e, tm, k in zip(engines, timers, stages)]


def route_and_run(insts: list[_Instance], router: Router, decisions: Iterable[tuple[float, int]], limit: float,
                  on_route: Callable[[list[InstanceState], int], None] | None = None,
                  place: Callable[[int, int], None] | None = None,
                  request_of: Callable[[int], RouteRequest] | None = None) -> None:
    """Route each (time, rank) of `decisions` (in time order) to an instance, then run every
    instance to the end. A stateful router sees the instances advanced to each decision's time;
    `place(rank, instance)`, if given, runs before the rank is queued (it may set its arrival);
    `request_of(rank)` is what a cache-aware router sees of the request."""
    stateful = getattr(router, "needs_state", True)
    watch = insts[0].watch
    for t, rank in decisions:
        if watch is not None and watch.certain:  # the rest is never routed: recorded as stopped early
            break
        if stateful:
            for inst in insts:
                inst.advance(t, limit, final=False)
            states = [inst.state(t) for inst in insts]
        else:
            states = []
        k = choose(router, insts, states if stateful else [None] * len(insts), rank, request_of)  # type: ignore[list-item]
        if on_route is not None:
            on_route(states, k)
        if place is not None:
            place(rank, k)
        insts[k].route(rank)
    for inst in insts:
        inst.advance(np.inf, limit, final=True)


def choose(router: Router, insts: Seq[_Instance], states: list[InstanceState], rank: int,
           request_of: Callable[[int], RouteRequest] | None) -> int:
    """The router's choice for `rank`. A cache-aware router also sees the request (and, if it
    reads the caches, each instance's cached lead of its prompt); the others are called as always."""
    if not getattr(router, "needs_request", False) or request_of is None:
        return router.choose(states)
    request = request_of(rank)
    if router.needs_cache:
        lookups = [getattr(inst.engine.blocks, "cached_prefix", None) for inst in insts]  # a plain BlockManager: none
        states = [dataclasses.replace(s, cached_blocks=lookup(request.block_hashes) if lookup is not None else 0)
                  for s, lookup in zip(states, lookups)]
    return router.choose(states, request)


def route_requests(run: SimRun, block_size: int) -> Callable[[int], RouteRequest]:
    """`request_of(rank)` for `run`: the request's session and its prompt's full-block hashes, as
    the engine's prefix cache hashes them (the sequence's own tokens when the engine caches, so
    they are hashed once; else the same identity at `block_size`)."""
    keys = session_keys(run.requests)

    def request_of(rank: int) -> RouteRequest:
        i, seq = run.order[rank], run.seqs[rank]
        spec = run.requests[i]
        tokens = seq.tokens if seq.tokens is not None else sim_sequence(rank, spec, block_size).tokens
        size = tokens.block_size
        n = spec.prompt_len // size
        if n:
            tokens.block_hash(n - 1)  # every hash up to it at once
        return RouteRequest(keys[i], tuple(tokens.hashes[:n]))
    return request_of


def simulate_cluster(
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
    on_route: Callable[[list[InstanceState], int], None] | None = None,
    give_up=None,
) -> list[RequestRecord]:
    """Run `requests` through a cluster of `engines` (instance i priced by `timers[i]`) behind
    `router`; one record per request, input order. Every instance has `pp` pipeline stages (or
    instance i has pp[i]: instances of different deployments).
    `stats`, if given, receives `instance_requests` (how many requests each instance got) and,
    with `pp` > 1, the pipelined loop's counters summed over instances; `on_route(states, choice)`
    sees every decision. With `give_up` (a GiveUp, search.stop_early) every instance stops once the
    cluster's failure is certain, as a single engine's run does (loop.simulate)."""
    limit = math.inf if time_limit_s is None else float(time_limit_s)
    sessions = has_sessions(requests)  # later turns released by finishes: routed as they are released
    if sessions and any(k > 1 for k in ([pp] if isinstance(pp, int) else pp)):
        raise ValueError("sessions on a cluster are simulated with pp=1 instances only")
    kind = ClusterSessionRun if sessions else SimRun
    run = kind(requests, engines[0] if engines else None, on_progress, give_up)  # type: ignore[arg-type]
    insts = make_instances(run, engines, timers, fast_forward, pp)
    request_of = route_requests(run, engines[0].blocks.block_size) if getattr(router, "needs_request", False) else None
    if sessions:
        run_sessions(run, insts, router, limit, request_of)  # type: ignore[arg-type]
    else:
        route_and_run(insts, router, ((a, rank) for rank, a in enumerate(run.arrivals.tolist())), limit, on_route,
                      request_of=request_of)
    if stats is not None:
        add_instance_stats(stats, insts, router=router, run=run)
    return run.records()


def add_instance_stats(stats: dict, insts: Seq[_Instance], prefix: str = "", router: Router | None = None,
                       run: SimRun | None = None) -> None:
    """Requests each instance got (`<prefix>instance_requests`), the pipelined loops' counters,
    summed, a cache-aware router's decisions by branch (`<prefix>router_decisions`) and, if `run`
    stopped early, where its furthest instance stopped (`stopped_early_s`)."""
    stats[f"{prefix}instance_requests"] = [inst.routed for inst in insts]
    if run is not None and run.watch is not None and run.watch.certain:
        stats["stopped_early_s"] = max(inst.pipe.t if inst.pipe is not None else inst.t for inst in insts)
    if getattr(router, "decisions", None) is not None:
        stats[f"{prefix}router_decisions"] = dict(router.decisions)  # type: ignore[union-attr]
    for inst in insts:
        for k, v in (inst.pipe.stats if inst.pipe is not None else {}).items():
            stats[k] = stats.get(k, 0) + v


# -- sessions: later turns released by finishes, routed as released ---------------------------

class ClusterSessionRun(SessionRun):
    """A SessionRun whose releases are handed to a router (`release_next`), not to one engine."""

    def __init__(self, requests: Seq[RequestSpec], engine: Engine, on_progress, give_up) -> None:
        super().__init__(requests, engine, on_progress, give_up)
        # By input index: the think time of the turn the request releases when it finishes (None:
        # it releases none); `think_next()` by rank. `_release_bound` reads it for every request of
        # an instance, every step.
        self._think_of = [None if j is None else requests[j].think_s for j in self.successor]
        self._think_next: list[float | None] = []

    def think_next(self) -> list[float | None]:
        """By rank (every rank released so far): `_think_of` its request."""
        by_rank, order = self._think_next, self.order
        if len(by_rank) < len(order):
            by_rank.extend(self._think_of[i] for i in order[len(by_rank):])
        return by_rank


def _release_bound(inst: _Instance, run: ClusterSessionRun, floor: float) -> float:
    """No turn that `inst`'s requests release comes before this: a request finishes no sooner than
    its remaining output tokens' iterations from now, each at least `floor` (one token's decode at
    context 1: no iteration costs less), and its next turn comes its think time after that."""
    best = math.inf
    think_next, seqs = run.think_next(), run.seqs
    engine = inst.engine
    for group in (engine.running, engine.waiting, [seqs[r] for r in inst.queue]):
        for seq in group:
            think = think_next[seq.seq_id]
            if think is not None:
                left = seq.output_len - seq.num_generated  # remaining_output, inlined: a hot loop
                bound = (left if left > 1 else 1) * floor + think
                if bound < best:
                    best = bound
    return inst.t + best


class SessionFleet(Protocol):
    """What a fleet that changes during the run (autoscale.py) adds to `run_sessions`."""

    next_tick: float  # its next decision (math.inf: none)

    def tick(self, t: float) -> list[_Instance]:
        """Decide at `t` (every busy instance is at or past it); the instances it started."""

    def routable(self, t: float) -> list[int]:
        """The instances (indices, in start order) a release at `t` may be routed to."""

    def routed(self, k: int, rank: int, t: float) -> None:
        """Rank `rank` went to instance k at t."""


def run_sessions(run: ClusterSessionRun, insts: list[_Instance], router: Router, limit: float,
                 request_of: Callable[[int], RouteRequest] | None, fleet: SessionFleet | None = None) -> None:
    """Route each turn as it is released and run every instance to the end. An instance is stepped
    only up to the earliest release another could make (`_release_bound`), so a release is routed
    with every instance at its time; with a `fleet`, its decisions are taken in time order with the
    releases (a decision first at a tie) and it may start instances."""
    stateful = getattr(router, "needs_state", True)
    stop = [math.inf]  # where the instance stepping now was told to stop
    floors: list[float] = []
    bounds: list[float] = []  # _release_bound of each instance as of its last change
    # The busy instances by clock and by bound: only the one advanced or routed to changes a step.
    clocks, busy_bounds = KeyedHeap(), KeyedHeap()

    def register(inst: _Instance) -> None:
        # a finish that released a turn before `stop`: stop there, the turn is routed first
        inst.halt = lambda: run.next_arrival < stop[0]
        floors.append(inst.timer.iteration_time([1], [1]))
        bounds.append(math.inf)

    def changed(k: int) -> None:
        busy = insts[k].busy()
        clocks.set(k, insts[k].t if busy else None)
        busy_bounds.set(k, bounds[k] if busy else None)
    for inst in insts:
        register(inst)
    watch = run.watch
    while watch is None or not watch.certain:  # (a failure certain: nothing more is routed or run)
        release = run.next_arrival
        tick = fleet.next_tick if fleet is not None else math.inf
        event = min(release, tick)
        behind = clocks.least()
        if behind is not None and behind[0] < min(event, limit):
            k = behind[1]
            lead = insts[k]  # the one furthest behind, up to the earliest release another could make
            others = busy_bounds.least_key_except(k, math.inf)
            stop[0] = min(event, limit, others if others > lead.t else math.nextafter(lead.t, math.inf))
            lead.advance(stop[0], limit, final=False)
            bounds[k] = _release_bound(lead, run, floors[k])
            changed(k)
            continue
        if event == math.inf or event > limit:
            break
        if fleet is not None and tick <= release:
            if release == math.inf and behind is None:  # nothing runs, nothing more can be released
                break
            stop[0] = tick
            for inst in fleet.tick(tick):  # the replicas it started
                insts.append(inst)
                register(inst)
            continue
        rank = run.release_next()[0]
        route_to = fleet.routable(release) if fleet is not None else range(len(insts))
        among = [insts[k] for k in route_to]
        states = [inst.state(release) for inst in among] if stateful else [None] * len(among)
        k = route_to[choose(router, among, states, rank, request_of)]  # type: ignore[arg-type]
        insts[k].route(rank)
        if fleet is not None:
            fleet.routed(k, rank, release)
        bounds[k] = _release_bound(insts[k], run, floors[k])
        changed(k)
    stop[0] = math.inf  # nothing left to release: every instance runs to the end
    for inst in insts:
        inst.advance(math.inf, limit, final=True)
