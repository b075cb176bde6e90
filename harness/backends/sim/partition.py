"""A cluster simulated apart (`cluster.workers` > 1, issue 39: a day of traffic in minutes).

When no routing decision reads an instance's state, every request's instance is known before the
run: round robin over arrivals without sessions, or a router whose choice for a request is its
own (`static_choice`: session affinity's ring) with every turn of a session on one instance, so no
instance's finishes release another's arrivals. Each instance then runs alone as a single-engine
run of the requests routed to it (`loop.simulate`'s, pp=1), which is exactly what the sequential cluster
loop records for it (cluster.py; tests/test_sim_partition.py proves the merge equal, sessions
included), in `workers` processes: a local process pool, or Ray tasks when this process already
runs inside Ray (a job of `hydra/launcher=ray`). Records come back in input order, with the
diagnostics the sequential loop gives.

Whether a run may be partitioned is decided in one place, `partition_plan`: anything that couples
instances (a state-reading router, sessions split across instances, pipeline-parallel instances,
which this path does not run) makes it say why not, and the caller runs the sequential loop.
"""
from __future__ import annotations

import math
import multiprocessing
import sys
from collections.abc import Callable, Iterator
from collections.abc import Sequence as Seq
from concurrent.futures import ProcessPoolExecutor
from functools import partial

from engines.core import Engine
from engines.routers import RouteRequest, Router
from harness.backends.sim.cache_stats import cache_stats
from harness.backends.sim.cluster import ClusterSessionRun
from harness.backends.sim.gc_pacing import fewer_collections
from harness.backends.sim.loop import IterationTimer, SimRun, step_until
from harness.backends.sim.record_columns import RecordColumns
from harness.backends.sim.request_rows import from_rows, to_rows
from harness.backends.sim.shared_array import remove_dir, shared_dir
from harness.backends.sim.timer import fast_timer
from harness.backends.sim.sessions import has_sessions
from harness.records import RequestRecord, RequestSpec, session_keys

# What a pool worker needs, imported once in the fork server rather than once per worker.
PRELOAD = ("harness.backends.sim",)


def partition_plan(requests: Seq[RequestSpec], router: Router, instances: int, pp: Seq[int]) -> list[int] | str:
    """Each request's instance (input order) when no routing decision depends on the instances'
    state; otherwise one line saying why the cluster must be simulated as one loop."""
    if any(k > 1 for k in pp):
        return "pipeline-parallel instances are simulated in the one loop"
    sessions = has_sessions(requests)
    static = getattr(router, "static_choice", None)
    if not getattr(router, "needs_state", True) and not sessions:
        order = _arrival_order(requests)  # the loop's decision order
        out = [0] * len(requests)
        for i in order:  # a stateless router's choices never read the states it is given
            out[i] = router.choose([None] * instances)  # type: ignore[list-item]
        return out
    if static is None:
        return f"router {router.name} reads the instances' state" + (
            " (or orders its choices by releases, which finishes on every instance decide)" if sessions else "")
    keys = session_keys(requests)
    out, home = [0] * len(requests), {}
    # The order the loop routes first turns and lone requests in (release = arrival for them). A
    # static choice for a request with a session is its session's alone (the Router protocol), so
    # a later turn, whenever it is released, goes where its session's first went: asked once a session.
    for i in _arrival_order(requests):
        key = keys[i]
        k = home.get(key) if key is not None else None
        if k is None:
            k = static(RouteRequest(key), instances)
            if k is None:
                return f"router {router.name} routes a request without a session by the instances' load"
            if key is not None:
                home[key] = k
        out[i] = k
    return out


def _arrival_order(requests: Seq[RequestSpec]) -> list[int]:
    """Indices by (arrival, index): a stable sort by arrival alone keeps ties in index order."""
    arrivals = [r.arrival_s for r in requests]
    return sorted(range(len(arrivals)), key=arrivals.__getitem__)


def _run_instances(parts: list[tuple[Seq[RequestSpec], Engine, IterationTimer, bool, float | None, bool]],
                   columns: bool = False):
    """A worker's share: each instance alone, as `loop.simulate` runs one engine (pp=1); its
    records (with `columns`, as RecordColumns where their fields allow), the requests it was given
    (a turn a time limit kept unreleased never was) and its prefix cache's counters."""
    with fewer_collections():  # a worker process runs no SimBackend.run
        return [_run_instance(*part, columns=columns) for part in parts]


def _run_shipped(parts: list[tuple[list[tuple], Engine, IterationTimer, bool, float | None, bool]],
                 into: str | None = None):
    """`_run_instances` in another process, of parts whose requests came as rows (`_shipped`): each
    instance's records as columns, to cross back as a few arrays, their token times through a file
    in directory `into` (shared_array.py) where it is given."""
    out = _run_instances([(from_rows(p[0]), *p[1:]) for p in parts], columns=True)
    return [(recs.shared(into) if isinstance(recs, RecordColumns) else recs, *rest) for recs, *rest in out]


def _run_instance(reqs: Seq[RequestSpec], engine: Engine, timer: IterationTimer, fast_forward: bool,
                  limit: float | None, caching: bool, columns: bool = False):
    stop = math.inf if limit is None else limit
    run = ClusterSessionRun(reqs, engine, None, None) if has_sessions(reqs) else SimRun(reqs, engine, None)
    step_until(run, fast_timer(timer), fast_forward, 0.0, stop, final=True)
    if isinstance(run, ClusterSessionRun):  # the loop routes (never starts) a turn released by the limit
        while run.next_arrival <= stop < math.inf:  # after its instance's last iteration began: so here
            run.release_next()
    routed = len(run.order) if isinstance(run, ClusterSessionRun) else len(reqs)
    records = (run.record_columns() if columns else None) or run.records()
    return records, routed, cache_stats(engine) if caching else None


def _run_one_shipped(part: tuple, into: str | None = None) -> tuple:
    return _run_shipped([part], into)[0]


def _shipped(part: tuple) -> tuple:
    """A part as it crosses to another process: its requests as rows (request_rows.py)."""
    return (to_rows(part[0]), *part[1:])


def _map(parts: list[tuple], workers: int) -> Iterator[tuple]:
    """Each instance's `_run_shipped` result, in the order of `parts` (one instance each), yielded
    as it comes: the caller unpacks an instance's records while the workers run the next ones.

    In a process pool each instance is a task, handed to the first free worker in the order given
    (largest first: the workers end together): the first starts once its own requests are sent, and
    each instance's records come back while the others run, rather than a worker's share at once
    before and after (some 3 s each way for 32 replicas over an hour). Inside a running Ray, the
    instances go in `workers` shares (dealt largest first), one Ray task each."""
    ray = sys.modules.get("ray")  # only a process Ray already runs in: a pool is cheaper to start than Ray
    if ray is not None and ray.is_initialized():
        yield from _ray_map(ray, parts, workers)
        return
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    if ctx.get_start_method() == "forkserver":
        ctx.set_forkserver_preload(list(PRELOAD))
    print(f"cluster.workers={workers}: {len(parts)} instances in a process pool of {min(workers, len(parts))}",
          file=sys.stderr)
    into = shared_dir()  # the records' token times come back through shared memory, not the pipe
    try:
        with ProcessPoolExecutor(max_workers=min(workers, len(parts)), mp_context=ctx) as pool:
            yield from pool.map(partial(_run_one_shipped, into=into), map(_shipped, parts))
    finally:
        remove_dir(into)


def _ray_map(ray, parts: list[tuple], workers: int) -> list:
    sizes = [len(p[0]) for p in parts]  # instances dealt to `workers` shares, largest first to the lightest share
    shares: list[list[int]] = [[] for _ in range(min(workers, len(sizes)))]
    load = [0] * len(shares)
    for k in sorted(range(len(sizes)), key=lambda k: (-sizes[k], k)):
        j = load.index(min(load))
        shares[j].append(k)
        load[j] += sizes[k]
    shares = [s for s in shares if s]
    remote = ray.remote(num_cpus=1, max_retries=0)(_run_shipped)
    print(f"cluster.workers={workers}: {len(shares)} shares as Ray tasks", file=sys.stderr)  # where they ran
    got = ray.get([remote.remote([_shipped(parts[k]) for k in share]) for share in shares])
    out: list = [None] * len(parts)
    for share, results in zip(shares, got):
        for k, r in zip(share, results):
            out[k] = r
    return out


def simulate_partitioned(
    requests: Seq[RequestSpec],
    engines: Seq[Engine],
    timers: Seq[IterationTimer],
    assignment: Seq[int],
    workers: int,
    *,
    fast_forward: bool = True,
    time_limit_s: float | None = None,
    caching: bool = False,
    stats: dict | None = None,
    sink: Callable[[list[int], Seq[RequestRecord]], None] | None = None,
) -> tuple[list[RequestRecord], list[dict] | None]:
    """Run each instance's requests (`assignment[i]`: request i's instance) alone, `workers` at
    once; the records in input order and, with `caching`, each instance's prefix cache counters.
    `stats` receives `instance_requests`, as the sequential loop gives it. With `sink`, each
    instance's records go to it as they come, with their input indices, and none are returned (from a
    worker, as RecordColumns: a sequence of the records, built as they are read)."""
    mine: list[list[int]] = [[] for _ in engines]
    for i, k in enumerate(assignment):
        mine[k].append(i)
    order = sorted(range(len(engines)), key=lambda k: (-len(mine[k]), k))  # largest first
    parts = [([requests[i] for i in mine[k]], engines[k], timers[k], fast_forward, time_limit_s, caching) for k in order]
    results = _map(parts, workers) if workers > 1 and len(parts) > 1 else _run_instances(parts)
    records: list[RequestRecord | None] = [None] * len(requests) if sink is None else []
    caches: list[dict | None] = [None] * len(engines)
    routed = [0] * len(engines)
    for k, (recs, given, cache) in zip(order, results):
        if isinstance(recs, RecordColumns):  # a sink reads its records from the columns (or each, built as read)
            recs = recs.taken()
        if sink is not None:
            sink(mine[k], recs)
        else:
            for i, r in zip(mine[k], recs):
                records[i] = r
        routed[k], caches[k] = given, cache
    if stats is not None:
        stats["instance_requests"] = routed
    return ([] if sink is not None else records), (caches if caching else None)  # type: ignore[return-value]
