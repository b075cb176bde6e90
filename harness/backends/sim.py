"""The simulated backend: a discrete-event loop over arrivals and batch completions.

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

import heapq
from collections.abc import Callable, Sequence as Seq
from typing import Protocol

import numpy as np

from engines.core import Batch, Engine, Sequence
from engines.core.sequence import SequenceStatus
from harness.records import RequestRecord, RequestSpec


class IterationTimer(Protocol):
    def batch_times(self, new_tokens: np.ndarray, context_lens: np.ndarray) -> np.ndarray:
        """Seconds of one iteration per batch row (used without pipeline parallelism)."""
        ...

    def stage_times(self, new_tokens: np.ndarray, context_lens: np.ndarray) -> np.ndarray:
        """Seconds of each pipeline stage, shape (..., pp) (used with pipeline parallelism)."""
        ...

    def pp_send_time(self, num_tokens: int) -> float:
        """Seconds to send a micro-batch's activations to the next pipeline stage."""
        ...


class _Timeline:
    """Per request: first scheduled, token times, finish."""

    def __init__(self, n: int) -> None:
        self.first_scheduled = np.full(n, np.nan)
        self.finished = np.full(n, np.nan)
        self.tokens: list[list[float]] = [[] for _ in range(n)]

    def token(self, i: int, t: float) -> None:
        self.tokens[i].append(t)

    def tokens_run(self, i: int, times: list[float]) -> None:
        self.tokens[i].extend(times)

    def token_times(self, i: int) -> np.ndarray:
        return np.array(self.tokens[i], dtype=np.float64)


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
) -> list[RequestRecord]:
    """Run `requests` through `engine` on a virtual clock; one record per request, input order.

    With `pp` > 1, `timer.stage_times` prices each pipeline stage and `timer.pp_send_time(tokens)`
    the hop between stages; up to `pp` micro-batches are in flight (`_run_pipelined`). With
    `time_limit_s`, the run stops at the first iteration boundary at or after it: requests not
    finished then carry `error="unfinished at time limit"` (never dropped), and those never
    started have NaN first-scheduled and first-token times. `stats`, if given, receives counters
    of the pipelined loop (launches stepped and replayed, replays, rows priced in bulk).
    """
    run = _Run(requests, engine, on_progress)
    limit = np.inf if time_limit_s is None else float(time_limit_s)
    if pp > 1:
        pipe = _Pipeline(run, timer, pp, fast_forward, limit)
        try:
            pipe.run()
        finally:
            if stats is not None:
                stats.update(pipe.stats)
    else:
        _run_serial(run, timer, fast_forward, limit)
    return run.records()


class _Run:
    """The state both loops share: arrivals in order, the engine, the timeline of every request."""

    def __init__(self, requests: Seq[RequestSpec], engine: Engine, on_progress) -> None:
        n = len(requests)
        self.requests = requests
        self.order = sorted(range(n), key=lambda i: (requests[i].arrival_s, i))
        self.arrivals = np.array([requests[i].arrival_s for i in self.order], dtype=np.float64)
        # Engine sequence ids are arrival ranks, so "lower id" means "arrived earlier" (FCFS).
        self.seqs = [Sequence(rank, requests[i].prompt_len, requests[i].output_len) for rank, i in enumerate(self.order)]
        self.engine = engine
        self.line = _Timeline(n)
        self.next = 0  # next arrival not yet given to the engine
        self.on_progress = on_progress

    @property
    def next_arrival(self) -> float:
        return float(self.arrivals[self.next]) if self.next < len(self.arrivals) else np.inf

    def admit_arrivals(self, t: float) -> None:
        while self.next < len(self.arrivals) and self.arrivals[self.next] <= t:
            self.engine.add(self.seqs[self.next])
            self.next += 1

    def started(self, batch: Batch, t: float) -> None:
        first = self.line.first_scheduled
        for seq, prefill in zip(batch.seqs, batch.is_prefill):
            if prefill and np.isnan(first[seq.seq_id]):
                first[seq.seq_id] = t

    def finished(self, seqs: tuple[Sequence, ...], t: float) -> None:
        for seq in seqs:
            self.line.finished[seq.seq_id] = t
        if seqs and self.on_progress is not None:
            self.on_progress(len(seqs))

    def stalled(self, t: float) -> RuntimeError:
        return RuntimeError(f"engine stalled at t={t:.3f}s with {len(self.engine.waiting)} waiting requests")

    def records(self) -> list[RequestRecord]:
        out: list[RequestRecord] = [None] * len(self.order)  # type: ignore[list-item]
        for rank, i in enumerate(self.order):
            spec = self.requests[i]
            times = self.line.token_times(rank)
            finished_s = float(self.line.finished[rank])
            out[i] = RequestRecord(
                request_id=spec.request_id,
                arrival_s=spec.arrival_s,
                prompt_len=spec.prompt_len,
                output_len=spec.output_len,
                first_scheduled_s=float(self.line.first_scheduled[rank]),
                first_token_s=float(times[0]) if len(times) else float("nan"),
                finished_s=finished_s,
                token_times_s=times,
                num_preemptions=self.seqs[rank].num_preemptions,
                error=None if not np.isnan(finished_s) else "unfinished at time limit",
            )
        return out


def _run_serial(run: _Run, timer: IterationTimer, fast_forward: bool, limit: float) -> None:
    engine = run.engine
    t = 0.0
    while t < limit:
        run.admit_arrivals(t)
        if not engine.has_unfinished:
            if run.next_arrival == np.inf:
                return
            t = run.next_arrival
            continue
        preemptions_before = engine.num_preemptions
        batch = engine.schedule()
        if batch is None:
            if run.next_arrival == np.inf:
                raise run.stalled(t)
            t = run.next_arrival
            continue
        run.started(batch, t)
        # A schedule() that preempted freed blocks a prefill-first policy had not seen when it
        # decided not to admit: the next decision may differ, so that iteration is stepped.
        if fast_forward and batch.is_decode_only and engine.num_preemptions == preemptions_before:
            t, finished = _decode_run(engine, batch, timer, run.line, t, run.next_arrival, limit)
        else:
            t, finished = _one_iteration(engine, batch, timer, run.line, t)
        run.finished(finished, t)


class _Pipeline:
    """Pipeline parallelism: each stage is a resource that runs one micro-batch at a time.

    A new micro-batch is scheduled whenever stage 0 is free and fewer than `pp` are in flight;
    it then passes every stage in order, each start waiting for both the previous stage's result
    (plus the activation send) and the stage itself. Sequences in flight cannot be scheduled
    again, so uneven micro-batches leave bubbles.

    Fast-forward (`_fast_forward`, after a launch): when every running sequence is in flight in
    a decode-only micro-batch, those micro-batches ("groups") cycle through the pipeline with a
    composition that only the events below can change, so the event loop is replayed with float
    arithmetic alone, each group's per-stage times priced for many iterations in one vectorized
    `stage_times` call, and the engine is brought up to date in bulk at the end. The replay stops
    (handing the plain loop an identical state) at the time limit, before an arrival that finds
    the waiting queue empty, and at any schedule point whose outcome it cannot know:
      * waiting queue empty: a schedule point returns every out-of-flight running decode, in
        arrival order (all policies: with nothing waiting there is nothing to admit, and decodes
        are never held back), unless a KV block allocation would fail (preemption): groups that
        finish sequences shrink, and groups out of flight together merge, inside the replay;
      * waiting queue not empty (the head cannot be admitted): a group relaunches alone only
        under a certificate from its own last plain launch (decode-only, exactly the
        out-of-flight sequences, no preemption, `decode_batch_repeats`) taken with the same
        running set; since then free KV blocks only shrank, so the head is still refused. A
        schedule point with nothing out of flight is replayed only if the plain loop saw one
        return nothing under the same running set. A finish or merge stops the replay.
    Exactness (bit-identical token times) is proven against plain stepping in tests/test_sim*.py.
    """

    def __init__(self, run: _Run, timer: IterationTimer, pp: int, fast_forward: bool, limit: float) -> None:
        self.run_ = run
        self.engine = run.engine
        self.timer = timer
        self.pp = pp
        self.fast_forward = fast_forward
        self.limit = limit
        self.stage_free = [0.0] * pp
        # heap of (completion time, launch no., batch, certificate); see _fast_forward
        self.in_flight: list[tuple[float, int, Batch, tuple[int, bool] | None]] = []
        self.launched = 0
        self.inflight_seqs = 0  # sequences in the batches in flight
        # Bumped whenever the running set may have changed (admission, preemption, finish).
        self.epoch = 0
        self.idle_epoch = -1  # epoch in which a schedule() with nothing out of flight returned None
        self.repeats = getattr(self.engine.policy, "decode_batch_repeats", None)
        self.tables: dict[tuple[int, ...], _Table] = {}  # priced decode runs of the last replay
        self.stats = dict.fromkeys(("plain_launches", "replayed_launches", "replays", "priced_rows", "table_hits", "merges",
                                    "stop_horizon", "stop_finish", "stop_idle", "stop_merge", "stop_blocks",
                                    "stop_idle_end"), 0)

    # -- the plain loop ---------------------------------------------------------------------
    def run(self) -> None:
        run, engine, pp, limit = self.run_, self.engine, self.pp, self.limit
        in_flight, stage_free = self.in_flight, self.stage_free
        t = 0.0
        while True:
            while in_flight and in_flight[0][0] <= t:
                end, _, done, _ = heapq.heappop(in_flight)
                self.inflight_seqs -= len(done)
                out = engine.complete(done)
                for seq in out.produced:
                    run.line.token(seq.seq_id, end)
                if out.finished:
                    self.epoch += 1
                run.finished(out.finished, end)
            if t >= limit:
                return
            run.admit_arrivals(t)
            batch = None
            if len(in_flight) < pp and stage_free[0] <= t and engine.has_unfinished:
                preemptions = engine.num_preemptions
                batch = engine.schedule()
                preempted = engine.num_preemptions != preemptions
                if preempted or (batch is not None and not batch.is_decode_only):
                    self.epoch += 1
                if batch is None and not preempted and engine.waiting and self.inflight_seqs == len(engine.running):
                    self.idle_epoch = self.epoch
            if batch is not None:
                run.started(batch, t)
                self.inflight_seqs += len(batch)
                cert = None
                if (batch.is_decode_only and not preempted and self.inflight_seqs == len(engine.running)
                        and (self.repeats is None or self.repeats(engine))):
                    cert = (self.epoch, bool(engine.waiting))
                stages, send = self._price(batch)
                end = self._launch(t, stages, send)
                heapq.heappush(in_flight, (end, self.launched, batch, cert))
                self.launched += 1
                self.stats["plain_launches"] += 1
                if self.fast_forward and cert is not None:
                    t = self._fast_forward(t)
                continue
            wake = min(
                in_flight[0][0] if in_flight else np.inf,
                run.next_arrival,
                stage_free[0] if stage_free[0] > t else np.inf,
            )
            if wake == np.inf:
                if engine.has_unfinished:
                    raise run.stalled(t)
                return
            t = wake

    def _launch(self, t: float, stages: list[float], send: float) -> float:
        """Occupy the stages from `t` on; returns the completion time. (The replay uses it too.)"""
        stage_free, last = self.stage_free, self.pp - 1
        ready = t
        for s in range(self.pp):
            start = ready if ready > stage_free[s] else stage_free[s]
            stage_free[s] = start + stages[s]
            ready = stage_free[s] + (send if s < last else 0.0)
        return stage_free[last]

    def _price(self, batch: Batch) -> tuple[list[float], float]:
        """Stage times and send time of one micro-batch (from a table the replay priced, if any)."""
        if self.tables and batch.is_decode_only:
            table = self.tables.get(tuple(s.seq_id for s in batch.seqs))
            if table is not None:
                row = table.row_for(batch.context_lens)
                if row is not None:
                    self.stats["table_hits"] += 1
                    return row, table.send
        new = np.asarray(batch.new_tokens)
        stages = self.timer.stage_times(new, np.asarray(batch.context_lens)).tolist()
        return stages, self.timer.pp_send_time(int(new.sum()))

    # -- the replay -------------------------------------------------------------------------
    def _fast_forward(self, t: float) -> float:
        """Replay from the loop top at `t` (just after a launch); returns the loop-top time at
        which the plain loop resumes, with every state it reads exactly as plain stepping leaves it."""
        engine, run = self.engine, self.run_
        if self.inflight_seqs != len(engine.running):
            return t  # a running sequence is out of flight: the policy decides about it
        waiting_empty = not engine.waiting
        groups, opaque = [], []
        for entry in self.in_flight:
            _, _, batch, cert = entry
            if waiting_empty:
                ok = batch.is_decode_only
            else:
                ok = cert is not None and cert[0] == self.epoch and cert[1]
            (groups if ok else opaque).append(entry)
        if not groups:
            return t
        # Another batch in flight (a prefill, say) is not replayed: its completion ends the replay.
        opaque_end = min((e[0] for e in opaque), default=np.inf)
        horizon = min(self.limit, opaque_end, run.next_arrival if waiting_empty else np.inf)
        if min(e[0] for e in groups) >= horizon:
            return t  # no group would come back before the replay has to stop
        if not waiting_empty and min(min(s.remaining_output for s in e[2].seqs) for e in groups) <= 2:
            return t
        latency = max(e[0] for e in groups) - t
        self.stats["replays"] += 1
        return _Replay(self, t, horizon, opaque_end, waiting_empty, latency, groups, opaque).go()


class _Table:
    """Per-stage times of a decode-only group for iterations lo..: row i prices contexts base + i."""

    __slots__ = ("base", "base0", "rows", "send", "need", "d")

    def __init__(self, base: np.ndarray, send: float) -> None:
        self.base = base
        self.base0 = int(base[0])
        self.rows: list[list[float] | None] = []
        self.send = send
        self.need: list[int] = []  # KV blocks the launch of iteration i allocates
        self.d: np.ndarray | None = None  # paged KV: see _Replay._new_table

    def row_for(self, context_lens: tuple[int, ...]) -> list[float] | None:
        i = context_lens[0] - self.base0
        if 0 <= i < len(self.rows) and self.rows[i] is not None:
            if np.array_equal(np.asarray(context_lens), self.base + i):
                return self.rows[i]
        return None


class _Group:
    """A decode-only micro-batch repeating inside the replay. Iteration i has contexts base + i;
    iterations < launched were launched, < done completed (not yet applied to the engine)."""

    __slots__ = ("seqs", "batch", "table", "off", "rem", "launched", "done", "times", "alloc", "cert", "entry")

    def __init__(self, batch: Batch, table: tuple[_Table, int], launched: int, cert, entry) -> None:
        self.seqs = batch.seqs
        self.batch = batch
        self.table, self.off = table  # iteration i is the table's row off + i
        self.rem = min(s.remaining_output for s in batch.seqs)  # iteration rem-1 finishes someone
        self.launched = launched
        self.done = 0
        self.times: list[float] = []
        self.alloc = 0  # KV blocks its replayed launches took (not yet taken in the engine)
        self.cert = cert
        self.entry = entry  # the plain loop's heap entry while nothing was replayed


class _Replay:
    def __init__(self, pipe: _Pipeline, t: float, horizon: float, opaque_end: float, waiting_empty: bool,
                 latency: float, groups: list, opaque: list) -> None:
        self.p = pipe
        self.t = t
        self.horizon = horizon
        self.opaque_end = opaque_end
        self.groups = groups
        self.opaque = opaque
        self.waiting_empty = waiting_empty
        self.latency = latency  # an estimate of one group's round trip, to size tables
        engine = pipe.engine
        self.bs = engine.blocks.block_size
        self.paged = engine.blocks.reserve_tokens is None
        self.pending = 0  # KV blocks taken by replayed launches, not yet in the engine
        self.old_tables = pipe.tables
        pipe.tables = {}

    # pricing ------------------------------------------------------------------------------
    def _extend(self, g: _Group, upto: int) -> None:
        """Price rows of `g` so that row `upto` exists, and more up to an estimate of the rows the
        replay will use (never past the iteration that finishes a sequence)."""
        table, off = g.table, g.off
        lo = len(table.rows)
        if off + upto < lo:
            return
        span = self.horizon - self.t
        # Rows past the replay's estimated end serve the plain loop's next launches (via _price).
        est = int(span / self.latency) + 8 if np.isfinite(span) and self.latency > 0 else g.rem
        hi = off + max(upto + 1, min(g.rem, self.cap, max(upto + est, 2 * (lo - off))))
        ctx = table.base[None, :] + np.arange(lo, hi, dtype=np.int64)[:, None]
        table.rows.extend(self.p.timer.stage_times(np.ones_like(ctx), ctx).tolist())
        self.p.stats["priced_rows"] += hi - lo
        if table.d is None:
            table.need.extend([0] * (hi - lo))
        else:
            i = np.arange(lo, hi, dtype=np.int64)[:, None]
            d = table.d[None, :]
            table.need.extend(np.count_nonzero((i >= d) & ((i - d) % self.bs == 0), axis=1).tolist())

    def _new_table(self, seqs: tuple[Sequence, ...], base: np.ndarray, first: int) -> tuple[_Table, int]:
        """The table of a group whose iteration 0 has contexts `base` (rows from `first` on are
        needed); a table the last replay priced for the same sequences is continued."""
        key = tuple(s.seq_id for s in seqs)
        old = self.p.tables.get(key) or self.old_tables.get(key)
        off = int(base[0]) - old.base0 if old is not None else -1
        if (old is not None and 0 <= off <= len(old.rows) and np.array_equal(old.base + off, base)
                and (off == len(old.rows) or old.rows[off] is not None or first > 0)):
            table = old
        else:
            off = 0
            table = _Table(base, self.p.timer.pp_send_time(len(seqs)))
            table.rows = [None] * first
            table.need = [0] * first
            if self.paged:
                have = np.fromiter((len(s.block_table) for s in seqs), dtype=np.int64, count=len(seqs))
                table.d = have * self.bs - base  # iteration i takes a block for a sequence iff i >= d, bs | i - d
        self.p.tables[key] = table
        return table, off

    # the replay loop ----------------------------------------------------------------------
    def go(self) -> float:
        p, engine, run = self.p, self.p.engine, self.p.run_
        pp, stage_free, waiting_empty = p.pp, p.stage_free, self.waiting_empty
        heap: list[tuple[float, int, _Group]] = []
        slots = pp - len(self.opaque)  # micro-batches the groups may have in flight
        for end, no, batch, cert in self.groups:
            base = np.asarray(batch.context_lens, dtype=np.int64)
            g = _Group(batch, self._new_table(batch.seqs, base, 1), 1, cert, (end, no, batch, cert))
            heap.append((end, no, g))
        heapq.heapify(heap)
        self.cap = min(g.rem for _, _, g in heap) + 2 if not waiting_empty else 1 << 62
        out: list = []  # out of flight: _Group (nothing applied since), or a list of loose sequences
        t = self.t
        try:
            while True:
                if t >= self.horizon:
                    stop = "stop_horizon"
                    break
                finished = False
                while heap and heap[0][0] <= t:
                    end, _, g = heapq.heappop(heap)
                    g.done += 1
                    g.times.append(end)
                    if g.done == g.rem:  # this iteration finishes a sequence: apply the group now
                        self._apply(g)
                        finished = True
                        loose = [s for s in g.seqs if s.status is SequenceStatus.RUNNING]
                        if loose:
                            out.append(loose)
                    else:
                        out.append(g)
                if finished and not waiting_empty:
                    stop = "stop_finish"
                    break  # the running set changed: the head of the queue may now be admitted
                if not waiting_empty:
                    run.admit_arrivals(t)  # joins the queue behind a head that cannot be admitted
                if len(heap) < slots and stage_free[0] <= t and engine.has_unfinished:
                    if not out:
                        if not waiting_empty and p.idle_epoch != p.epoch:
                            stop = "stop_idle"
                            break  # has not been seen to return nothing with this running set
                    else:
                        if len(out) == 1 and isinstance(out[0], _Group):
                            g = out[0]
                            if not waiting_empty and g.cert[0] != p.epoch:
                                stop = "stop_finish"
                                break  # (a finish stops the replay first; kept as a guard)
                            i = g.launched
                            self._extend(g, i)
                        else:
                            if not waiting_empty:
                                stop = "stop_merge"
                                break
                            p.stats["merges"] += 1
                            g = self._merge(out)
                            out = [g]
                            i = 0
                        need = g.table.need[g.off + i]
                        if need > engine.blocks.num_free - self.pending:
                            stop = "stop_blocks"
                            break  # a decode would find no free block: preemption is the policy's
                        out = []
                        end = p._launch(t, g.table.rows[g.off + i], g.table.send)
                        heapq.heappush(heap, (end, p.launched, g))
                        p.launched += 1
                        p.stats["replayed_launches"] += 1
                        g.launched += 1
                        g.alloc += need
                        self.pending += need
                        g.cert = (p.epoch, not waiting_empty)
                        continue
                wake = min(
                    heap[0][0] if heap else np.inf,
                    self.opaque_end,
                    run.next_arrival,
                    stage_free[0] if stage_free[0] > t else np.inf,
                )
                if wake == np.inf:
                    stop = "stop_idle_end"
                    break
                t = wake
            p.stats[stop] += 1
        finally:
            self._hand_back(heap, out)
        return t

    # applying the replay to the engine ----------------------------------------------------
    def _apply(self, g: _Group) -> None:
        """Apply `g`'s completed iterations to the engine (tokens, KV growth, finishes); its
        sequences are then out of flight."""
        p = self.p
        if g.done:
            finished = p.engine.complete_decode_run(g.batch, g.done)
            times = g.times
            line = p.run_.line
            for seq in g.seqs:
                line.tokens_run(seq.seq_id, times)
            if finished:
                p.epoch += 1
                p.run_.finished(finished, times[-1])
        else:
            for seq in g.seqs:
                seq.in_flight = False
        self.pending -= g.alloc
        g.alloc = 0

    def _merge(self, out: list) -> _Group:
        """Groups and loose sequences out of flight together: the schedule point takes them all,
        in arrival order (waiting queue empty). Applies them and returns the new group."""
        seqs: list[Sequence] = []
        for item in out:
            if isinstance(item, _Group):
                self._apply(item)
                seqs.extend(item.seqs)
            else:
                seqs.extend(item)
        seqs.sort(key=lambda s: s.seq_id)
        seqs_t = tuple(seqs)
        ctx = tuple(s.num_computed for s in seqs_t)
        batch = Batch(seqs_t, (1,) * len(seqs_t), ctx, (False,) * len(seqs_t))
        table = self._new_table(seqs_t, np.asarray(ctx, dtype=np.int64), 0)
        g = _Group(batch, table, 0, None, None)
        self._extend(g, 0)
        return g

    def _hand_back(self, heap: list, out: list) -> None:
        """Bring the engine and the plain loop's heap to the state plain stepping would have."""
        p = self.p
        for item in out:
            if isinstance(item, _Group):
                self._apply(item)
        entries = list(self.opaque)
        inflight = sum(len(e[2]) for e in self.opaque)
        for end, no, g in heap:
            inflight += len(g.seqs)
            if g.entry is not None and g.done == 0 and g.launched == 1:
                entries.append(g.entry)  # untouched since the plain loop launched it
                continue
            self._apply(g)  # completed iterations; the one in flight is taken again below
            for seq in g.seqs:
                p.engine.blocks.grow(seq, seq.num_computed + 1)
                seq.in_flight = True
            ctx = tuple(s.num_computed for s in g.seqs)
            batch = Batch(g.seqs, g.batch.new_tokens, ctx, g.batch.is_prefill)
            entries.append((end, no, batch, g.cert))
        heapq.heapify(entries)
        p.in_flight[:] = entries
        p.inflight_seqs = inflight
        assert self.pending == 0, self.pending


def _one_iteration(engine: Engine, batch: Batch, timer: IterationTimer, line: _Timeline, t: float):
    dt = float(timer.batch_times(np.asarray(batch.new_tokens), np.asarray(batch.context_lens)))
    t_end = t + dt
    out = engine.complete(batch)
    for seq in out.produced:
        line.token(seq.seq_id, t_end)
    return t_end, out.finished


def _decode_run(
    engine: Engine,
    batch: Batch,
    timer: IterationTimer,
    line: _Timeline,
    t: float,
    next_arrival: float,
    limit: float,
):
    """Advance a run of identical decode-only iterations in one step; returns (end time, finished)."""
    k = engine.decode_run_limit(batch)
    ctx0 = np.asarray(batch.context_lens, dtype=np.int64)
    ones = np.ones((1, len(ctx0)), dtype=np.int64)
    dt0 = float(timer.batch_times(ones[0], ctx0))
    horizon = min(next_arrival, limit) if not engine.waiting else limit
    if np.isfinite(horizon):
        # Iterations only get longer as contexts grow, so at most this many start before horizon.
        k = min(k, int((horizon - t) / dt0) + 1) if dt0 > 0 else k
    k = max(k, 1)
    ctx = ctx0[None, :] + np.arange(k, dtype=np.int64)[:, None]
    dts = timer.batch_times(np.broadcast_to(ones, ctx.shape), ctx)
    # Summed from t in order, as plain stepping would (bit-identical clock).
    ends = np.cumsum(np.concatenate(([t], dts)))[1:]
    if np.isfinite(horizon) and k > 1:
        starts = ends - dts
        k = max(1, int(np.searchsorted(starts, horizon, side="left")))
        ends = ends[:k]
    finished = engine.complete_decode_run(batch, k)
    times = ends.tolist()
    for seq in batch.seqs:
        line.tokens_run(seq.seq_id, times)
    return float(ends[-1]), finished
