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
from itertools import accumulate, compress

import numpy as np

from engines.core import Batch, Engine, Sequence
from engines.perf.scalar_rows import run_ends
from harness.backends.sim.closed_loop import ClosedLoop
from harness.backends.sim.pipeline import Pipeline
from harness.backends.sim.record_columns import RecordColumns
from harness.backends.sim.sessions import SessionRelease, cache_block_size, has_sessions, sim_sequence, unreleased_fields
from harness.backends.sim.timeline import Timeline, Watch
from harness.backends.sim.timer import FastTimer, IterationTimer, fast_timer
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
        first = self.line.first_scheduled
        for seq in compress(batch.seqs, batch.is_prefill):
            if first[seq.seq_id] != first[seq.seq_id]:  # NaN: not scheduled before
                first[seq.seq_id] = t
                if self.watch is not None and t - self.arrivals[seq.seq_id] > self.watch.delay_s:
                    self.watch.late += 1

    def finished(self, seqs: tuple[Sequence, ...], t: float) -> None:
        for seq in seqs:
            self.line.finished[seq.seq_id] = t
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


def step_until(run, timer: FastTimer, fast_forward: bool, t: float, stop: float, *, final: bool,
               stuck: bool = False) -> tuple[float, bool]:
    """Step `run`'s engine from `t` to its first iteration boundary at or after `stop`, or until it
    idles with no arrival to come; returns (time, stuck). `run` is a SimRun or anything with its
    engine, line, admit_arrivals, next_arrival, started, finished and stalled (a cluster instance).

    `stuck`: the engine could schedule nothing and no arrival is known yet; with `final` that is a
    stall (raised), otherwise the run waits for its next arrival (a cluster instance resumed after
    more requests are routed to it)."""
    engine = run.engine
    watch = getattr(run, "watch", None)  # search.stop_early (a cluster's instances share the run's)
    log = getattr(run, "log", None)  # the iteration log of a single engine's run, if asked for
    halt = getattr(run, "halt", None)  # a cluster instance under sessions: a turn it released must be routed first
    # A host KV tier (engines/core/kv_tier.py): each iteration waits for the blocks its schedule()
    # moved between GPU and host; its iterations are stepped (a decode run may evict, and store, midway).
    tier = getattr(engine.blocks, "tier", None)
    if tier is not None and not hasattr(timer, "kv_tier_time"):
        raise ValueError("an engine with a host KV tier needs a timer that prices its transfers (timer.OffloadPriced)")
    while t < stop:
        if watch is not None and watch.certain:
            break
        if halt is not None and halt():
            break
        run.admit_arrivals(t)
        if not engine.has_unfinished or stuck:
            if run.next_arrival == np.inf:
                if stuck and final:
                    raise run.stalled(t)
                break
            stuck = False
            t = run.next_arrival
            continue
        preemptions_before = engine.num_preemptions
        batch = engine.schedule()
        if batch is None:
            if run.next_arrival == np.inf:
                if final:
                    raise run.stalled(t)
                stuck = True
                break
            t = run.next_arrival
            continue
        run.started(batch, t)
        # A schedule() that preempted freed blocks a prefill-first policy had not seen when it
        # decided not to admit: the next decision may differ, so that iteration is stepped.
        runs = fast_forward and tier is None and engine.num_preemptions == preemptions_before
        if runs and batch.is_decode_only:
            t, finished = _decode_run(engine, batch, timer, run.line, t, run.next_arrival, stop, log)
        elif runs and log is None and watch is None and halt is None and (k := engine.chunk_run_limit(batch)) > 1:
            # (stepped where a log wants each iteration, or a watch or halt may stop between them)
            t, finished = _chunk_run(engine, batch, k, timer, run.line, t, stop)
        else:
            start = t
            dt = timer.iteration_time(batch.new_tokens, batch.context_lens)
            if tier is not None:
                dt += timer.kv_tier_time(*tier.drain())
            t, finished = _one_iteration(engine, batch, run.line, t, dt)
            if log is not None:
                log.iteration(batch, start, t)
        run.finished(finished, t)
    return t, stuck


def _one_iteration(engine: Engine, batch: Batch, line: Timeline, t: float, dt: float):
    t_end = t + dt
    out = engine.complete(batch)
    line.tokens_at(out.produced, t_end)
    return t_end, out.finished


def _chunk_run(engine: Engine, batch: Batch, k: int, timer: FastTimer, line: Timeline, t: float, stop: float):
    """Advance up to `k` (> 1, Engine.chunk_run_limit) iterations repeating `batch`, its decodes
    one context further and its chunk one chunk further each row; returns (end time, finished).
    Each row is priced as stepping prices it (the same call on the same new tokens and contexts)
    and its end summed from the one before; a row starting at or after `stop` is not run."""
    new_tokens, first = batch.new_tokens, batch.context_lens
    rows = getattr(timer, "chunk_run_times", None)  # optional (timer.py): every row in one call
    dts = rows(new_tokens, first, k) if rows is not None else None
    if dts is not None:
        end = t + dts[0]
        ends = [end]
        for i in range(1, k):
            if end >= stop:
                break
            end = end + dts[i]
            ends.append(end)
    else:
        contexts, prompt = first[:-1], first[-1]
        chunk = new_tokens[-1]
        price = timer.iteration_time
        end = t + price(new_tokens, first)
        ends = [end]
        for i in range(1, k):
            if end >= stop:
                break
            end = end + price(new_tokens, tuple([c + i for c in contexts]) + (prompt + i * chunk,))
            ends.append(end)
    finished = engine.complete_chunk_run(batch, len(ends))
    line.tokens_run(batch.seqs[:-1], ends)
    return end, finished


def _decode_run(
    engine: Engine,
    batch: Batch,
    timer: FastTimer,
    line: Timeline,
    t: float,
    next_arrival: float,
    limit: float,
    log=None,
):
    """Advance a run of identical decode-only iterations in one step; returns (end time, finished)."""
    k = engine.decode_run_limit(batch)
    horizon = min(next_arrival, limit) if not engine.waiting else limit
    # A lone sequence's run is a slice of the timer's per-context prices (optional, timer.py)
    alone = getattr(timer, "alone_decode_times", None) if len(batch.seqs) == 1 else None
    table = alone(batch.context_lens[0] + k) if alone is not None else None
    dts = None
    if table is not None:
        c = batch.context_lens[0]
        dt0 = table[c]
    else:
        floor_of = getattr(timer, "decode_time_floor", None)  # optional (timer.py)
        floor = floor_of(len(batch.seqs)) if floor_of is not None and k > 1 and math.isfinite(horizon) else None
        if floor:  # price the rows the floor allows (a few more than start before horizon), the first
            # of them the first iteration's time (FastTimer's contract): no separate pricing of it
            rows = min(k, int((horizon - t) / floor) + 1)
            if rows > 1:
                dts = timer.decode_run_times(batch.context_lens, 0, rows)
        dt0 = dts[0] if dts else timer.iteration_time(batch.new_tokens, batch.context_lens)
    if math.isfinite(horizon):
        # Iterations only get longer as contexts grow, so at most this many start before horizon.
        k = min(k, int((horizon - t) / dt0) + 1) if dt0 > 0 else k
    if k <= 1:  # a run of one is one iteration (complete_decode_run(batch, 1) is complete(batch))
        end, finished = _one_iteration(engine, batch, line, t, dt0)
        if log is not None:
            log.iteration(batch, t, end)
        return end, finished
    if table is not None:
        dts = table[c:c + k]
    elif dts is None:
        dts = timer.decode_run_times(batch.context_lens, 0, k)
    else:
        del dts[k:]  # (k <= rows: dt0 >= floor)
    # Summed from t in order, as plain stepping would (bit-identical clock), cut before the first
    # iteration that starts at or after horizon (k > 1 here; one at least).
    ends = run_ends(dts, t, horizon)
    k = len(ends)
    if log is not None:  # each iteration starts where the one before ended
        log.decode_run(batch, [t] + ends[:-1], ends)
    finished = engine.complete_decode_run(batch, k)
    line.tokens_run(batch.seqs, ends)
    return ends[-1], finished
