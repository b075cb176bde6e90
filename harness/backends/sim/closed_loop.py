"""Closed-loop arrivals in the simulator (arrival=closed_loop): at most `concurrency` requests are
outstanding; the first `concurrency` arrive at t = 0 and each finish releases the next request, in
input order, at the time of that finish, as the live load generator sends the next request when a
response ends (harness/loadgen/run.py). A record's `arrival_s` is that release time (the live
records' planned time), so TTFT and scheduling delay count from it.

The offline throughput runs of the first Sarathi paper keep the batch full this way: B requests in
flight, a finished one replaced by a waiting one.
"""
from __future__ import annotations

from collections.abc import Sequence as Seq

import numpy as np

from engines.core import Engine, Sequence
from harness.backends.sim.sessions import sim_sequence
from harness.records import RequestSpec


class ClosedLoop:
    """Mixed into loop.SimRun (loop.ClosedLoopRun): arrivals released by finishes (the loops read
    next_arrival, admit_arrivals and finished, nothing else of the arrivals). A mixin, so this
    module needs nothing of loop.py's."""

    def __init__(self, requests: Seq[RequestSpec], engine: Engine, on_progress, give_up, concurrency: int) -> None:
        super().__init__(requests, engine, on_progress, give_up)
        self.release = np.full(len(requests), np.inf)
        self.released = min(concurrency, len(requests))
        self.release[:self.released] = 0.0

    def _plan_arrivals(self, requests: Seq[RequestSpec], block_size: int | None) -> None:
        """Release order is input order, as the live client's (SimRun's hook; its arrival times are
        the releases, set as finishes come)."""
        self.order = list(range(len(requests)))
        # The planned times, ranked as SimRun ranks them (all 0 in a closed loop; the Watch reads them)
        self.arrivals = np.sort(np.array([r.arrival_s for r in requests], dtype=np.float64))
        self.seqs = [sim_sequence(i, r, block_size) for i, r in enumerate(requests)]

    @property
    def next_arrival(self) -> float:
        return float(self.release[self.next]) if self.next < self.released else np.inf

    def admit_arrivals(self, t: float) -> None:
        while self.next < self.released and self.release[self.next] <= t:
            self.engine.add(self.seqs[self.next])
            self.next += 1

    def finished(self, seqs: tuple[Sequence, ...], t: float) -> None:
        more = min(len(seqs), len(self.release) - self.released)
        self.release[self.released:self.released + more] = t
        self.released += more
        super().finished(seqs, t)

    def record_arrival(self, i: int) -> float:
        """A released request's record states its release (SimRun.records); one never released, its plan."""
        return float(self.release[i]) if np.isfinite(self.release[i]) else self.requests[i].arrival_s
