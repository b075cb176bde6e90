"""A run's timeline: per request, when it was first scheduled, its token times and its finish (loop.py).

Token times are kept once, however many requests share them: `times` holds, as C doubles, each
iteration's end that produced tokens (a decode run's rows once for its whole batch), and each
request holds its pieces of it as (start, stop) index pairs, one after another in `pieces[i]`. A
piece that continues where the request's last one stopped (a lone request's next token) extends
it. Before, each request kept a list of Python floats, every token time a pointer per request and
a float object per iteration: a replica-day's run held some 730 MB of them, and turning them into
its records' arrays read them scattered across that memory (1.45 of the run's 19 CPU s). The
records are the same doubles (tests/test_sim.py and the simulator's fingerprint compare them).

Compiled with the engine core and the stepping that calls it (engines/compiled.MODULES,
stepping.py): the per-iteration bookkeeping is native, its engine sequences read as C structs.
"""
from __future__ import annotations

import math
from array import array
from typing import Any

import numpy as np

from engines.compiled import mypyc_attr
from engines.core import Batch, Sequence


class Watch:
    """Counts, as a run goes, what makes its failure of `give_up` certain (a lower bound of the
    gaps over the TBT limit and of the late starts it will end with), so the run can stop there."""

    def __init__(self, give_up, requests) -> None:
        self.tbt_s, self.delay_s = give_up.tbt_s, give_up.delay_s
        self.tbt_needed = give_up.tbt_exceed_needed(sum(r.output_len - 1 for r in requests))
        self.late_needed = give_up.late_needed(len(requests))
        self.tbt_over = 0
        self.late = 0

    @property
    def certain(self) -> bool:
        return self.tbt_over >= self.tbt_needed or self.late >= self.late_needed


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)  # (engines/compiled.py)
class Timeline:
    """Per request (by engine sequence id): first scheduled, token times, finish; with a `Watch`,
    the gaps over its TBT limit."""

    def __init__(self, n: int, watch: Any = None) -> None:
        self.first_scheduled: list[float] = [math.nan] * n
        self.finished: list[float] = [math.nan] * n  # (a list: a numpy element's store costs ~10x)
        self.times: Any = array("d")  # every token-producing iteration's end, once
        self.pieces: list[list[int]] = [[] for _ in range(n)]  # per request: start, stop, start, stop, ...
        self.watch: Any = watch  # a Watch (a test's stand-in: anything with its fields)

    def start(self, batch: Batch, t: float, arrivals: Any) -> None:
        """`batch` starts at `t`: its prefills' requests not scheduled before are first scheduled
        now; with a watch, those that waited over its delay since their arrival (`arrivals`, by
        sequence id) are late."""
        first, watch = self.first_scheduled, self.watch
        seqs, prefill = batch.seqs, batch.is_prefill
        for j in range(len(seqs)):
            if prefill[j]:
                i = seqs[j].seq_id
                if first[i] != first[i]:  # NaN: not scheduled before
                    first[i] = t
                    if watch is not None and t - arrivals[i] > watch.delay_s:
                        watch.late += 1

    def finish(self, seqs: tuple[Sequence, ...], t: float) -> None:
        """`seqs` finished at `t`."""
        finished = self.finished
        for seq in seqs:
            finished[seq.seq_id] = t

    def tokens_at(self, seqs: tuple[Sequence, ...], t: float) -> None:
        """One token at `t` for each of `seqs` (engine sequences; their ids index the timeline)."""
        self._add(seqs, [t])

    def tokens_run(self, seqs: tuple[Sequence, ...], times: list[float]) -> None:
        """Tokens at `times` (a decode run's iteration ends, in order) for each of `seqs`."""
        if times:
            self._add(seqs, times)

    def _add(self, seqs: tuple[Sequence, ...], times: list[float]) -> None:
        buf, pieces = self.times, self.pieces
        start: int = len(buf)
        buf.fromlist(times)  # (a list: array's extend appends item by item, 2x slower)
        stop: int = len(buf)
        if self.watch is not None:
            self._add_watched(seqs, times, start, stop)
            return
        # (boxed once, shared by every request's piece, as the Python source shares them: compiled,
        # each store of an int would box a new object)
        start_at: Any = start
        stop_at: Any = stop
        for seq in seqs:
            mine = pieces[seq.seq_id]
            if mine and mine[-1] == start:  # it goes on where its last piece stopped
                mine[-1] = stop_at
            else:
                mine.append(start_at)
                mine.append(stop_at)

    def _add_watched(self, seqs: tuple[Sequence, ...], times: list[float], start: int, stop: int) -> None:
        """`_add`'s pieces, counting each request's gaps over the TBT limit on the way: the first
        from its own last token (the store's last time for one that goes on, so once for all of
        them), the rest between `times` (the same for every request)."""
        buf, pieces, watch = self.times, self.pieces, self.watch
        tbt, first = watch.tbt_s, times[0]
        goes_on = start > 0 and first - buf[start - 1] > tbt
        over: int = len(seqs) * sum(b - a > tbt for a, b in zip(times, times[1:])) if len(times) > 1 else 0
        for seq in seqs:
            mine = pieces[seq.seq_id]
            if mine and mine[-1] == start:
                over += goes_on
                mine[-1] = stop
            else:
                over += bool(mine) and first - buf[mine[-1] - 1] > tbt
                mine.append(start)
                mine.append(stop)
        watch.tbt_over += over

    def token_times(self, i: int) -> np.ndarray:
        """Request i's token times (float64, its own copy)."""
        return self.gathered((i,))[0]

    def first_token(self, i: int) -> float:
        """Request i's first token time, NaN before it has one."""
        mine = self.pieces[i]
        return self.times[mine[0]] if mine else math.nan

    def gathered(self, order) -> tuple[np.ndarray, list[int]]:
        """The token times of the requests `order` names (None: one without tokens), one request's
        after another in one array (a copy: the store may grow on), and how many each has."""
        buf = np.frombuffer(self.times, dtype=np.float64)  # a view, released when this returns
        empty: list[int] = []
        parts, lengths = [], []
        for i in order:
            mine = self.pieces[i] if i is not None else empty
            n = 0
            for k in range(0, len(mine), 2):
                parts.append(buf[mine[k]:mine[k + 1]])
                n += mine[k + 1] - mine[k]
            lengths.append(n)
        return (np.concatenate(parts) if parts else np.empty(0)), lengths
