"""The simulator's event loop: arrivals and batch completions on a virtual clock.

The engine core decides every batch; an iteration timer (the performance model) says how long it
takes; a virtual clock advances by that much. An iteration starts as soon as the previous one
ends (or, if the engine is idle, at the next arrival) and sees every request that arrived by its
start. A token's time is the end of the iteration that produced it.

Speed: between events a decode-only batch repeats with the same sequences, its cost growing only
with context. Such a run is advanced in one step (`fast_forward`): the timer prices all of its
iterations in one vectorized call and every token time is recorded. It is exact, which
tests/test_sim.py proves against plain stepping on the same workloads.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from collections.abc import Sequence as Seq
from itertools import accumulate

import numpy as np

from engines.core import Batch, Engine, Sequence
from harness.backends.sim.closed_loop import ClosedLoop
from harness.backends.sim.pipeline import Pipeline
from harness.backends.sim.record_columns import RecordColumns
from harness.backends.sim.sessions import SessionRelease, cache_block_size, has_sessions, sim_sequence, unreleased_fields
from harness.backends.sim.stepping import step_until
from harness.backends.sim.timeline import Timeline, Watch
from harness.backends.sim.timer import IterationTimer, fast_timer
from harness.records import STOPPED_EARLY, RequestRecord, RequestSpec


def simulate(
    requests: Seq[RequestSpec],
    engine: Engine,
    timer: IterationTimer,
    *,
    pp: int = 1,
    fast_forward: bool = True,
    time_limit_s: float | None = None,
    on_progress: Callable[[int], None] | None = None,
    stats: dict[str, int] | None = None,
    give_up=None,
    concurrency: int | None = None,
    log=None,
) -> list[RequestRecord]:
    """Run `requests` through `engine` on a virtual clock; one record per request, input order.

    With `pp` > 1, `timer.stage_times` prices each pipeline stage and `timer.pp_send_time(tokens)`
    the hop between stages; up to `pp` micro-batches are in flight (`pipeline.Pipeline`). With
    `time_limit_s`, the run stops at the first iteration boundary at or after it: requests not
    finished then carry `error="unfinished at time limit"` (never dropped), and those never
    started have NaN first-scheduled and first-token times. `stats`, if given, receives counters
    of the pipelined loop (launches stepped and replayed, replays, rows priced in bulk). With
    `give_up` (a GiveUp) the run stops at the first iteration boundary where failing
    it is certain; what did not finish then says so (STOPPED_EARLY) and `stats` gets
    `stopped_early_s`. With `concurrency`, arrivals are a closed loop (closed_loop.ClosedLoopRun:
    each finish releases the next request). `log` (an iterations.IterationLog) records every
    iteration; with pp > 1 it and the closed loop step the pipeline plainly (its replay knows
    neither the log nor arrivals that finishes release), which gives the same records.
    """
    sessions = has_sessions(requests)
    if concurrency is not None:
        run = ClosedLoopRun(requests, engine, on_progress, give_up, concurrency)
    else:
        run = (SessionRun if sessions else SimRun)(requests, engine, on_progress, give_up)
    run.log = log
    if log is not None:
        log.bind(run.order)
    limit = np.inf if time_limit_s is None else float(time_limit_s)
    timer = fast_timer(timer)
    if pp > 1:  # the replay knows neither the log nor arrivals that finishes release: those step plainly
        pipe = Pipeline(run, timer, pp, fast_forward and log is None and concurrency is None and not sessions, limit, log)
        try:
            pipe.run()
        finally:
            if stats is not None:
                stats.update(pipe.stats)
        t = pipe.t
    else:
        t = step_until(run, timer, fast_forward, 0.0, limit, final=True)[0]
    if stats is not None and run.watch is not None and run.watch.certain:
        stats["stopped_early_s"] = t
    if log is not None and sessions:
        log.bind(run.order)  # a session's turns get their sequence ids as they are released
    return run.records()


class SimRun:
    """The state both loops share: arrivals in order, the engine, the timeline of every request."""

    def __init__(self, requests: Seq[RequestSpec], engine: Engine, on_progress, give_up=None) -> None:
        n = len(requests)
        self.requests = requests
        self.engine = engine
        self._plan_arrivals(requests, cache_block_size(engine))  # None without a prefix cache: plain sequences
        self.watch = Watch(give_up, requests) if give_up is not None else None
        self.line = Timeline(n, self.watch)
        self.next = 0  # next arrival not yet given to the engine
        self.on_progress = on_progress
        self.log = None  # an iterations.IterationLog, when the caller wants one

    def _plan_arrivals(self, requests: Seq[RequestSpec], block_size: int | None) -> None:
        """`order` (rank -> input index), `arrivals` (rank -> time) and `seqs` (rank -> the engine's
        sequence): all known up front here; a mixin whose finishes release arrivals plans its own."""
        self.order = sorted(range(len(requests)), key=lambda i: (requests[i].arrival_s, i))
        self.arrivals = np.array([requests[i].arrival_s for i in self.order], dtype=np.float64)
        # The same times as Python floats, for the loop's test every iteration (a numpy scalar's
        # read and compare cost ~10x a float's). This run's own admit_arrivals and next_arrival read
        # them; a cluster's instances read `arrivals` (disagg.py moves a decode's arrival there).
        self._arrival_list = self.arrivals.tolist()
        # Engine sequence ids are arrival ranks, so "lower id" means "arrived earlier" (FCFS).
        self.seqs = [sim_sequence(rank, requests[i], block_size) for rank, i in enumerate(self.order)]

    @property
    def next_arrival(self) -> float:
        times = self._arrival_list
        return times[self.next] if self.next < len(times) else np.inf

    def admit_arrivals(self, t: float) -> None:
        times = self._arrival_list
        while self.next < len(times) and times[self.next] <= t:
            self.engine.add(self.seqs[self.next])
            self.next += 1

    def started(self, batch: Batch, t: float) -> None:
        self.line.start(batch, t, self.arrivals)  # (stepping.step_until calls it itself without a watch)

    def finished(self, seqs: tuple[Sequence, ...], t: float) -> None:
        self.line.finish(seqs, t)
        if seqs and self.on_progress is not None:
            self.on_progress(len(seqs))

    def stalled(self, t: float) -> RuntimeError:
        return stalled_error(self.engine, t)

    @property
    def cut_off(self) -> str:
        """Why a request that did not finish did not."""
        return STOPPED_EARLY if self.watch is not None and self.watch.certain else "unfinished at time limit"

    def record_arrival(self, i: int) -> float:
        """The arrival request i's record states (a session's turn says its release instead)."""
        return self.requests[i].arrival_s

    def records(self) -> list[RequestRecord]:
        """Every request's record, in input order (None for a request never released: SessionRelease's)."""
        out: list[RequestRecord] = [None] * len(self.requests)  # type: ignore[list-item]
        rows = list(self._record_rows())
        times, lengths = self.line.gathered([row[1] for row in rows])  # at once; each record a slice of it
        for (i, _, (rid, prompt, output, preempted, cached), (arrival, scheduled, first, finished, _), error), stop, n \
                in zip(rows, accumulate(lengths), lengths):
            out[i] = RequestRecord(rid, arrival, prompt, output, scheduled, first, finished, times[stop - n:stop],
                                   num_preemptions=preempted, error=error, cached_tokens=cached)
        return out

    def record_columns(self) -> RecordColumns | None:
        """The records as columns (record_columns.py), built from the timeline without a record or
        an array each (a worker's records crossing back: partition.py): those of `records` field for
        field. None where a field is not what a column gives back."""
        n = len(self.requests)
        ints: list = [None] * n
        floats: list = [None] * n
        ranks: list[int | None] = [None] * n
        errors: dict[int, str] = {}
        for i, rank, whole, real, error in self._record_rows():
            ints[i], floats[i], ranks[i] = whole, real, rank
            if error is not None:
                errors[i] = error
        for i in (i for i in range(n) if ints[i] is None):  # never released (a session's turn cut)
            ints[i], floats[i] = unreleased_fields(self.requests[i])
            errors[i] = self.cut_off
        times, lengths = self.line.gathered(ranks)
        return RecordColumns.build(ints, floats, times, lengths, errors)

    def _record_rows(self):
        """Per request released, in release order: its input index, its rank, the integer fields
        (request_id, prompt_len, output_len, num_preemptions, cached_tokens), the float ones
        (arrival_s, first_scheduled_s, first_token_s, finished_s, dispatched_s) and its error."""
        line, requests, seqs = self.line, self.requests, self.seqs
        for rank, i in enumerate(self.order):
            spec, seq = requests[i], seqs[rank]
            finished_s = float(line.finished[rank])
            yield (i, rank, (spec.request_id, spec.prompt_len, spec.output_len, seq.num_preemptions, seq.cached_tokens),
                   (self.record_arrival(i), float(line.first_scheduled[rank]), line.first_token(rank), finished_s,
                    math.nan), None if finished_s == finished_s else self.cut_off)


class ClosedLoopRun(ClosedLoop, SimRun):
    """A SimRun with closed-loop arrivals (closed_loop.py)."""


class SessionRun(SessionRelease, SimRun):
    """A SimRun whose later turns are released by finishes (sessions.py)."""


def stalled_error(engine: Engine, t: float) -> RuntimeError:
    return RuntimeError(f"engine stalled at t={t:.3f}s with {len(engine.waiting)} waiting requests")
