"""Pipeline parallelism in the simulator: stages as resources, micro-batches in flight, and the
exact fast-forward of decode-only micro-batches (the replay, harness/backends/sim/replay.py)."""
from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

import numpy as np

from engines.core import Batch
from harness.backends.sim.replay import Replay, Table
from harness.backends.sim.sessions import cache_block_size

if TYPE_CHECKING:
    from harness.backends.sim.loop import SimRun
    from harness.backends.sim.timer import FastTimer


class Pipeline:
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
        are never held back), unless a KV block allocation would fail (preemption) or the policy
        caps a micro-batch (`max_micro_batch_seqs`, orca_best split across the stages) below them:
        groups that finish sequences shrink, and groups out of flight together merge, inside the replay;
      * waiting queue not empty (the head cannot be admitted): a group relaunches alone only
        under a certificate from its own last plain launch (decode-only, exactly the
        out-of-flight sequences, no preemption, `Engine.decode_batch_repeats`) taken with the same
        running set; since then free KV blocks only shrank, so the head is still refused. A
        schedule point with nothing out of flight is replayed only if the plain loop saw one
        return nothing under the same running set. A finish or merge stops the replay.
    Exactness (bit-identical token times) is proven against plain stepping in tests/test_sim*.py.
    """

    def __init__(self, run: SimRun, timer: FastTimer, pp: int, fast_forward: bool, limit: float,
                 log=None) -> None:
        self.run_ = run
        self.log = log  # an iterations.IterationLog (plain launches only: the caller turns the replay off)
        self.engine = run.engine
        self.timer = timer
        self.pp = pp
        # The replay takes a group's KV blocks when it hands back, not launch by launch: with a prefix
        # cache the order of takes, frees and evictions decides what stays cached, so it steps plainly.
        self.fast_forward = fast_forward and cache_block_size(run.engine) is None
        self.limit = limit
        # search.stop_early: the run (or a cluster's instance) stops at the first loop top where failing
        # is certain. The replay does not look; the loop top after it does.
        self.watch = getattr(run, "watch", None)
        self.stage_free = [0.0] * pp
        # heap of (completion time, launch no., batch, certificate); see _fast_forward
        self.in_flight: list[tuple[float, int, Batch, tuple[int, bool] | None]] = []
        self.launched = 0
        self.inflight_seqs = 0  # sequences in the batches in flight
        # Bumped whenever the running set may have changed (admission, preemption, finish).
        self.epoch = 0
        self.idle_epoch = -1  # epoch in which a schedule() with nothing out of flight returned None
        self.tables: dict[tuple[int, ...], Table] = {}  # priced decode runs of the last replay
        # Resumable (a cluster's instance, harness/backends/sim/cluster.py): run() returns at the
        # loop top once t >= limit, or before sleeping past `pause`, and the next run() goes on from t.
        self.t = 0.0
        self.pause = np.inf
        self.stats = dict.fromkeys(("plain_launches", "replayed_launches", "replays", "priced_rows", "table_hits", "merges",
                                    "stop_horizon", "stop_finish", "stop_idle", "stop_merge", "stop_blocks",
                                    "stop_idle_end"), 0)

    def run(self) -> None:
        run, engine, pp, limit = self.run_, self.engine, self.pp, self.limit
        in_flight, stage_free, watch = self.in_flight, self.stage_free, self.watch
        t = self.t
        while True:
            while in_flight and in_flight[0][0] <= t:
                end, _, done, _ = heapq.heappop(in_flight)
                self.inflight_seqs -= len(done)
                out = engine.complete(done)
                run.line.tokens_at(out.produced, end)
                if out.finished:
                    self.epoch += 1
                run.finished(out.finished, end)
            if t >= limit or (watch is not None and watch.certain):
                self.t = t
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
                        and engine.decode_batch_repeats()):
                    cert = (self.epoch, bool(engine.waiting))
                stages, send = self._price(batch)
                free_before = list(stage_free) if self.log is not None else None
                end = self._launch(t, stages, send)
                if self.log is not None:
                    self.log.launch(batch, t, free_before, stages, send, stage_free)
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
            if wake > self.pause:  # (never with the default pause: inf)
                self.t = t
                return
            if wake == np.inf:
                if engine.has_unfinished:
                    raise run.stalled(t)
                self.t = t
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
        stages = self.timer.iteration_stage_times(batch.new_tokens, batch.context_lens)
        return stages, self.timer.pp_send_time(sum(batch.new_tokens))

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
        return Replay(self, t, horizon, opaque_end, waiting_empty, latency, groups, opaque).go()


