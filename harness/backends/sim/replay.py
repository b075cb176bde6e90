"""The pipelined simulator's replay: decode-only micro-batches ("groups") cycling through the
pipeline, advanced with float arithmetic and tables of per-stage times priced in bulk, then
handed back to the engine through its own methods (see Pipeline's docstring for when it runs and
why it is exact)."""
from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

import numpy as np

from engines.core import Batch, Sequence
from engines.core.sequence import SequenceStatus

if TYPE_CHECKING:
    from harness.backends.sim.pipeline import Pipeline


class Table:
    """Per-stage times of a decode-only group for iterations lo..: row i prices contexts base + i."""

    __slots__ = ("base", "base0", "rows", "send", "need", "d")

    def __init__(self, base: np.ndarray, send: float) -> None:
        self.base = base
        self.base0 = int(base[0])
        self.rows: list[list[float] | None] = []
        self.send = send
        self.need: list[int] = []  # KV blocks the launch of iteration i allocates
        self.d: np.ndarray | None = None  # paged KV: see Replay._new_table

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

    def __init__(self, batch: Batch, table: tuple[Table, int], launched: int, cert, entry) -> None:
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


class Replay:
    def __init__(self, pipe: Pipeline, t: float, horizon: float, opaque_end: float, waiting_empty: bool,
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
        self.paged = engine.kv_paged
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
        table.rows.extend(self.p.timer.decode_run_stage_times(table.base, lo, hi).tolist())
        self.p.stats["priced_rows"] += hi - lo
        if table.d is None:
            table.need.extend([0] * (hi - lo))
        else:
            i = np.arange(lo, hi, dtype=np.int64)[:, None]
            d = table.d[None, :]
            table.need.extend(np.count_nonzero((i >= d) & ((i - d) % self.bs == 0), axis=1).tolist())

    def _new_table(self, seqs: tuple[Sequence, ...], base: np.ndarray, first: int) -> tuple[Table, int]:
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
            table = Table(base, self.p.timer.pp_send_time(len(seqs)))
            table.rows = [None] * first
            table.need = [0] * first
            if self.paged:
                # Iteration i takes a block for a sequence iff i >= d and bs | i - d, d its decode
                # headroom (its contexts are `base`: the engine has not advanced it since).
                table.d = np.asarray(self.p.engine.decode_headroom(seqs), dtype=np.int64)
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
                            if not waiting_empty or self._over_cap(out):
                                stop = "stop_merge"
                                break
                            p.stats["merges"] += 1
                            g = self._merge(out)
                            out = [g]
                            i = 0
                        need = g.table.need[g.off + i]
                        if need > engine.free_blocks - self.pending:
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
                    p.pause,  # a cluster's next arrival, not yet routed (inf for one engine)
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
        finished = p.engine.complete_decode_run(g.batch, g.done)  # done = 0: only out of flight
        if g.done:
            times = g.times
            line = p.run_.line
            line.tokens_run(g.seqs, times)
            if finished:
                p.epoch += 1
                p.run_.finished(finished, times[-1])
        self.pending -= g.alloc
        g.alloc = 0

    def _over_cap(self, out: list) -> bool:
        """Would the merged group exceed the policy's micro-batch cap (orca_best split across the
        stages)? The policy then launches part of it: the plain loop decides which."""
        cap = self.p.engine.policy.max_micro_batch_seqs
        return cap is not None and sum(len(i.seqs) if isinstance(i, _Group) else len(i) for i in out) > cap

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
        batch = Batch.decodes(seqs_t)
        table = self._new_table(seqs_t, np.asarray(batch.context_lens, dtype=np.int64), 0)
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
            self._apply(g)  # completed iterations; the one in flight is launched again below
            entries.append((end, no, p.engine.launch_decodes(g.seqs), g.cert))
        heapq.heapify(entries)
        p.in_flight[:] = entries
        p.inflight_seqs = inflight
        assert self.pending == 0, self.pending


