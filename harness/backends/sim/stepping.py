"""The simulator's stepping (loop.py's event loop, per schedule step): compiled with the engine core.

`step_until` runs a run's engine from one time to the next boundary, with the decode runs, chunk
runs and single iterations it advances by; loop.py, cluster.py and partition.py call it. Compiled
by mypyc with the engine core (engines/compiled.MODULES), its calls into the compiled Engine, Batch,
Timeline and the decode-run arithmetic are direct C calls and its own per-step lines native: it
ran interpreted, ~8 % of a replica-day's samples in its own frames, each call into the compiled
core through a boxing wrapper. The run and the timer stay duck-typed (a run is a SimRun, its mixins'
or a cluster instance; a timer the performance model or a test's stand-in). It runs as its Python
source as well (SARATHI_HARNESS_PURE=1, an unbuilt checkout): the same arithmetic in the same order.
"""
from __future__ import annotations

import math
from typing import Any

from engines.core import Batch, Engine, Sequence
from engines.perf.scalar_rows import run_ends
from harness.backends.sim.releases import Releases
from harness.backends.sim.timeline import Timeline


def step_until(run: Any, timer: Any, fast_forward: bool, t: float, stop: float, *, final: bool,
               stuck: bool = False) -> tuple[float, bool]:
    """Step `run`'s engine from `t` to its first iteration boundary at or after `stop`, or until it
    idles with no arrival to come; returns (time, stuck). `run` is a SimRun or anything with its
    engine, line, admit_arrivals, next_arrival, started, finished and stalled (a cluster instance).

    `stuck`: the engine could schedule nothing and no arrival is known yet; with `final` that is a
    stall (raised), otherwise the run waits for its next arrival (a cluster instance resumed after
    more requests are routed to it)."""
    engine: Engine = run.engine
    line: Timeline = run.line
    watch = getattr(run, "watch", None)  # search.stop_early (a cluster's instances share the run's)
    log = getattr(run, "log", None)  # the iteration log of a single engine's run, if asked for
    halt = getattr(run, "halt", None)  # a cluster instance under sessions: a turn it released must be routed first
    # A run with sessions (sessions.SessionRelease): whether a release is due, and when the next one
    # comes, asked of its releases natively (its admit_arrivals admits exactly those due)
    releases: Releases | None = getattr(run, "releases", None)
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
        if releases is None or releases.next_time() <= t:
            run.admit_arrivals(t)
        if not engine.has_unfinished or stuck:
            if run.next_arrival == math.inf:
                if stuck and final:
                    raise run.stalled(t)
                break
            stuck = False
            t = run.next_arrival
            continue
        preemptions_before = engine.num_preemptions
        scheduled = engine.schedule()
        if scheduled is None:
            if run.next_arrival == math.inf:
                if final:
                    raise run.stalled(t)
                stuck = True
                break
            t = run.next_arrival
            continue
        batch: Batch = scheduled
        if watch is None:  # the run's `started` is its timeline's (SimRun.started), which needs no
            line.start(batch, t, None)  # arrivals without a watch: called here, natively
        else:
            run.started(batch, t)
        # A schedule() that preempted freed blocks a prefill-first policy had not seen when it
        # decided not to admit: the next decision may differ, so that iteration is stepped.
        runs = fast_forward and tier is None and engine.num_preemptions == preemptions_before
        if runs and batch.is_decode_only:
            # (the next arrival ends the run only where nothing waits: read only then)
            horizon = stop if engine.waiting else min(run.next_arrival if releases is None else releases.next_time(), stop)
            t, finished = _decode_run(engine, batch, timer, line, t, horizon, log)
        elif runs and log is None and watch is None and halt is None and (k := engine.chunk_run_limit(batch)) > 1:
            # (stepped where a log wants each iteration, or a watch or halt may stop between them)
            t, finished = _chunk_run(engine, batch, k, timer, line, t, stop)
        else:
            start = t
            dt = timer.iteration_time(batch.new_tokens, batch.context_lens)
            if tier is not None:
                dt += timer.kv_tier_time(*tier.drain())
            t, finished = _one_iteration(engine, batch, line, t, dt)
            if log is not None:
                log.iteration(batch, start, t)
        if finished:  # (a run's `finished` with none does nothing: not called, once a step)
            run.finished(finished, t)
    return t, stuck


def _one_iteration(engine: Engine, batch: Batch, line: Timeline, t: float, dt: float) -> tuple[float, tuple[Sequence, ...]]:
    t_end = t + dt
    out = engine.complete(batch)
    line.tokens_at(out.produced, t_end)
    return t_end, out.finished


def _chunk_run(engine: Engine, batch: Batch, k: int, timer: Any, line: Timeline, t: float,
               stop: float) -> tuple[float, tuple[Sequence, ...]]:
    """Advance up to `k` (> 1, Engine.chunk_run_limit) iterations repeating `batch`, its decodes
    one context further and its chunk one chunk further each row; returns (end time, finished).
    Each row is priced as stepping prices it (the same call on the same new tokens and contexts)
    and its end summed from the one before; a row starting at or after `stop` is not run."""
    new_tokens, first = batch.new_tokens, batch.context_lens
    rows = getattr(timer, "chunk_run_times", None)  # optional (timer.py): every row in one call
    dts = rows(new_tokens, first, k) if rows is not None else None
    end: float
    ends: list[float]
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
    timer: Any,
    line: Timeline,
    t: float,
    horizon: float,
    log: Any = None,
) -> tuple[float, tuple[Sequence, ...]]:
    """Advance a run of identical decode-only iterations in one step, none starting at or after
    `horizon` but the first; returns (end time, finished)."""
    k = engine.decode_run_limit(batch)
    # A lone sequence's run is a slice of the timer's per-context prices (optional, timer.py)
    alone = getattr(timer, "alone_decode_times", None) if len(batch.seqs) == 1 else None
    table: Any = alone(batch.context_lens[0] + k) if alone is not None else None
    dts: Any = None
    dt0: float
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
