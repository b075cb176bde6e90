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

from collections.abc import Callable, Sequence as Seq
from typing import Protocol

import numpy as np

from engines.core import Batch, Engine, Sequence
from harness.records import RequestRecord, RequestSpec


class IterationTimer(Protocol):
    def batch_times(self, new_tokens: np.ndarray, context_lens: np.ndarray) -> np.ndarray: ...


class _Timeline:
    """Per request: first scheduled, token times (as chunks, concatenated at the end), finish."""

    def __init__(self, n: int) -> None:
        self.first_scheduled = np.full(n, np.nan)
        self.finished = np.full(n, np.nan)
        self.tokens: list[list] = [[] for _ in range(n)]

    def token(self, i: int, t: float) -> None:
        self.tokens[i].append(t)

    def tokens_run(self, i: int, times: np.ndarray) -> None:
        self.tokens[i].append(times)

    def token_times(self, i: int) -> np.ndarray:
        parts = self.tokens[i]
        if not parts:
            return np.empty(0)
        return np.concatenate([np.atleast_1d(p) for p in parts]).astype(np.float64, copy=False)


def simulate(
    requests: Seq[RequestSpec],
    engine: Engine,
    timer: IterationTimer,
    *,
    fast_forward: bool = True,
    time_limit_s: float | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> list[RequestRecord]:
    """Run `requests` through `engine` on a virtual clock; one record per request, input order.

    With `time_limit_s`, the run stops at the first iteration boundary at or after it: requests
    not finished then carry `error="unfinished at time limit"` (never dropped), and those never
    started have NaN first-scheduled and first-token times.
    """
    n = len(requests)
    order = sorted(range(n), key=lambda i: (requests[i].arrival_s, i))
    arrivals = np.array([requests[i].arrival_s for i in order], dtype=np.float64)
    # Engine sequence ids are arrival ranks, so "lower id" means "arrived earlier" (FCFS).
    seqs = [Sequence(rank, requests[i].prompt_len, requests[i].output_len) for rank, i in enumerate(order)]
    line = _Timeline(n)
    limit = np.inf if time_limit_s is None else float(time_limit_s)

    t = 0.0
    nxt = 0  # next arrival not yet given to the engine
    done = 0
    while t < limit:
        while nxt < n and arrivals[nxt] <= t:
            engine.add(seqs[nxt])
            nxt += 1
        if not engine.has_unfinished:
            if nxt == n:
                break
            t = float(arrivals[nxt])
            continue
        preemptions_before = engine.num_preemptions
        batch = engine.schedule()
        if batch is None:
            if nxt == n:
                raise RuntimeError(f"engine stalled at t={t:.3f}s with {len(engine.waiting)} waiting requests")
            t = float(arrivals[nxt])  # nothing fits until something arrives (cannot happen with FCFS)
            continue
        for seq, prefill in zip(batch.seqs, batch.is_prefill):
            if prefill and np.isnan(line.first_scheduled[seq.seq_id]):
                line.first_scheduled[seq.seq_id] = t
        next_arrival = float(arrivals[nxt]) if nxt < n else np.inf
        # A schedule() that preempted freed blocks a prefill-first policy had not seen when it
        # decided not to admit: the next decision may differ, so that iteration is stepped.
        if fast_forward and batch.is_decode_only and engine.num_preemptions == preemptions_before:
            t, finished = _decode_run(engine, batch, timer, line, t, next_arrival, limit)
        else:
            t, finished = _one_iteration(engine, batch, timer, line, t)
        for seq in finished:
            line.finished[seq.seq_id] = t
        if finished:
            done += len(finished)
            if on_progress is not None:
                on_progress(len(finished))

    records = [None] * n
    for rank, i in enumerate(order):
        spec = requests[i]
        times = line.token_times(rank)
        finished_s = float(line.finished[rank])
        records[i] = RequestRecord(
            request_id=spec.request_id,
            arrival_s=spec.arrival_s,
            prompt_len=spec.prompt_len,
            output_len=spec.output_len,
            first_scheduled_s=float(line.first_scheduled[rank]),
            first_token_s=float(times[0]) if len(times) else float("nan"),
            finished_s=finished_s,
            token_times_s=times,
            num_preemptions=seqs[rank].num_preemptions,
            error=None if not np.isnan(finished_s) else "unfinished at time limit",
        )
    return records


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
    for seq in batch.seqs:
        line.tokens_run(seq.seq_id, ends)
    return float(ends[-1]), finished
