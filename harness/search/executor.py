"""Where a round's probes run at once (search.workers > 1): a pluggable executor.

A `ProbeExecutor` maps a picklable function over a round's items and yields `(index, result)` as
each finishes; closing the iterator early (an interrupt) cancels what has not started. The local
one is a process pool: the simulator is CPU-bound Python, so processes, not threads. The Ray one
(`search.executor=ray`) runs each probe as a Ray task (one CPU) on a cluster: a local Ray started
for the run, the cluster by `search.ray_address`, or the Ray the job already runs in (a job of
`hydra/launcher=ray`, whose searches then share the cluster with every other job's).
`open_executor` picks one from the search settings.
"""
from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol, TypeVar

from harness.launch import ray_session

if TYPE_CHECKING:
    from harness.settings.search import SearchSettings

T = TypeVar("T")
R = TypeVar("R")

# What a worker needs, imported once in the fork server rather than once per worker.
PRELOAD = ("harness.search.probe", "harness.backends.sim")


# A search whose probes are smaller than this runs faster alone than it pays to start a process for it.
SEARCH_PROCESS_MIN_REQUESTS = 512


def searches_at_once(search: SearchSettings, deterministic: bool, searches: int, pool: ProbeExecutor | None,
                     one_of_many: bool = False) -> int:
    """How many of a run's searches (one per scheduler and seed) run at once, each in a process of
    its own: `search.searches_at_once`, or with 0 one per CPU where the searches are simulated
    (deterministic: the same answer as one after another), serial ones (no `pool` of probes), of
    probes of at least SEARCH_PROCESS_MIN_REQUESTS requests, and the run is not `one_of_many` jobs
    (a multirun, figure=all, nightly: the launcher runs those side by side, one CPU each)."""
    if not deterministic or pool is not None or searches < 2:
        return 1
    wanted = search.searches_at_once
    if wanted == 0:
        if search.num_requests < SEARCH_PROCESS_MIN_REQUESTS or one_of_many:
            return 1
        wanted = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(wanted, searches))


class ProbeExecutor(Protocol):
    workers: int

    def map_unordered(self, fn: Callable[[T], R], items: Sequence[T]) -> Iterator[tuple[int, R]]: ...


class LocalProcessPool(AbstractContextManager):  # `with` gives the pool itself and closes it
    """`workers` processes on this machine, started on first use and kept for every round (and
    every search) until `close`. Fork-server workers: no thread or lock of the caller (progress
    bars, Arrow's pools) is copied into them mid-use, and each starts without re-importing. One
    worker: the tasks run here, in order (no process to start)."""

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None

    def map_unordered(self, fn: Callable[[T], R], items: Sequence[T]) -> Iterator[tuple[int, R]]:
        if self.workers == 1:
            yield from enumerate(map(fn, items))
            return
        if self._pool is None:
            methods = multiprocessing.get_all_start_methods()
            ctx = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
            if ctx.get_start_method() == "forkserver":
                ctx.set_forkserver_preload(list(PRELOAD))
            self._pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=ctx)
        pool = self._pool
        pending: dict[Future, int] = {pool.submit(fn, item): i for i, item in enumerate(items)}
        try:
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for f in sorted(done, key=pending.__getitem__):  # ties in submission order
                    yield pending.pop(f), f.result()
        finally:
            for f in pending:  # left early: what has not started never will
                f.cancel()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __exit__(self, *exc: object) -> None:
        self.close()


class RayExecutor(AbstractContextManager):
    """Probes as Ray tasks of one CPU each; connects on creation (an unreachable address is one
    line before anything is written) and disconnects on `close` if it connected."""

    def __init__(self, workers: int, address: str | None = None) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.workers = workers
        self.address = address
        self._connected = ray_session.connect({"address": address})
        self._remote: dict[Callable, object] = {}

    def map_unordered(self, fn: Callable[[T], R], items: Sequence[T]) -> Iterator[tuple[int, R]]:
        import ray

        remote = self._remote.get(fn)
        if remote is None:
            remote = self._remote[fn] = ray.remote(num_cpus=1, max_retries=0)(fn)
        index = {remote.remote(item): i for i, item in enumerate(items)}  # type: ignore[attr-defined]
        pending = list(index)
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                for ref in done:
                    try:
                        result = ray.get(ref)
                    except ray.exceptions.RayTaskError as e:  # the probe's own exception, as a pool raises it
                        raise e.as_instanceof_cause() from None
                    yield index[ref], result
        finally:
            for ref in pending:  # left early: what has not finished is cancelled
                ray.cancel(ref, force=True)

    def close(self) -> None:
        ray_session.disconnect(self._connected)
        self._connected = False

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_executor(search: SearchSettings) -> LocalProcessPool | RayExecutor:
    """The executor search.executor names, for search.workers probes at once."""
    if search.executor == "ray":
        return RayExecutor(search.workers, search.ray_address)
    return LocalProcessPool(search.workers)
