"""Sessions in the simulator (harness/workload/sessions.py): each session's first request arrives at
its planned time; a later turn is released `think_s` after the request before it (`after`)
finished, as the live load generator releases it. Engine sequence ids are release ranks (FCFS by
release time, then input order), given as requests are released. A record's `arrival_s` is its
release time, so TTFT and scheduling delay count from it; a turn never released (its session cut
by a time limit or a stopped probe) is recorded as not started, and is judged as one.

Also here, by name: the engine sequence for a request (`sim_sequence`, engine_sequence.py), which
the loops take from this module.
"""
from __future__ import annotations

import math
from collections.abc import Sequence as Seq

import numpy as np

from engines.core import Engine, PrefixCachingBlockManager, Sequence
from harness.backends.sim.engine_sequence import sim_sequence
from harness.backends.sim.releases import Releases
from harness.records import RequestRecord, RequestSpec


def cache_block_size(engine: Engine | None) -> int | None:
    """The engine's block size if it keeps a prefix cache (its sequences then need token identity)."""
    if engine is not None and isinstance(engine.blocks, PrefixCachingBlockManager):
        return engine.blocks.block_size
    return None


def has_sessions(requests: Seq[RequestSpec]) -> bool:
    return any(r.after is not None for r in requests)


class SessionRelease:
    """Mixed into loop.SimRun (loop.SessionRun): arrivals released by finishes; the loops read
    next_arrival, admit_arrivals and finished, nothing else of the arrivals."""

    def __init__(self, requests: Seq[RequestSpec], engine: Engine, on_progress, give_up) -> None:
        super().__init__(requests, engine, on_progress, give_up)
        n = len(requests)
        index = {r.request_id: i for i, r in enumerate(requests)}
        self.successor: list[int | None] = [None] * n
        for i, r in enumerate(requests):
            if r.after is not None:
                if r.after not in index:
                    raise ValueError(f"request {r.request_id} follows request {r.after}, which is not in the run")
                self.successor[index[r.after]] = i
        self.continued: dict[int, Sequence] = {}  # request id -> its sequence, until its next turn is released
        # The releases to come (releases.py; the stepping reads it natively: `releases`)
        self.releases = Releases(sorted((r.arrival_s, i) for i, r in enumerate(requests) if r.after is None),
                                 [-1 if j is None else j for j in self.successor], [r.think_s for r in requests],
                                 self.order)
        self.release = [math.nan] * n  # (a list: a numpy element's store costs ~10x a list's)

    def _plan_arrivals(self, requests: Seq[RequestSpec], block_size: int | None) -> None:
        """Nothing is released yet (SimRun's hook: its up-front plan would be built for nothing)."""
        self.order: list[int] = []  # rank -> input index, as released
        self.arrivals: list[float] = []  # rank -> release time
        self.seqs: list[Sequence] = []
        self.block_size = block_size

    @property
    def next_arrival(self) -> float:
        return self.releases.next_time()

    def admit_arrivals(self, t: float) -> None:
        while self.releases.next_time() <= t:
            rank, seq = self.release_next()
            self.engine.add(seq)
            self.next = rank + 1

    def release_next(self) -> tuple[int, Sequence]:
        """The earliest pending release, given its rank (release order): the rank and its sequence,
        whose tokens continue its previous turn's."""
        at, i = self.releases.take()
        rank = len(self.order)
        self.order.append(i)
        self.arrivals.append(at)
        self.release[i] = at
        spec, continued = self.requests[i], self.successor[i] is not None
        before = self.continued.pop(spec.after) if spec.after is not None else None
        seq = sim_sequence(rank, spec, self.block_size, before, continued)
        if continued:
            self.continued[spec.request_id] = seq
        self.seqs.append(seq)
        return rank, seq

    def finished(self, seqs: tuple[Sequence, ...], t: float) -> None:
        self.releases.finished(seqs, t)
        super().finished(seqs, t)

    def record_arrival(self, i: int) -> float:
        return float(self.release[i])  # a released turn's record states its release (SimRun.records)

    def records(self) -> list[RequestRecord]:
        released = super().records()  # the released ones, in input order; the rest are None
        out = []
        for spec, r in zip(self.requests, released):
            if r is None:
                (rid, prompt, output, preempted, cached), (arrival, scheduled, first, finished, _) = unreleased_fields(spec)
                r = RequestRecord(rid, arrival, prompt, output, scheduled, first, finished, np.empty(0),
                                  num_preemptions=preempted, error=self.cut_off, cached_tokens=cached)
            out.append(r)
        return out


def unreleased_fields(spec: RequestSpec) -> tuple[tuple, tuple]:
    """The integer fields (request_id, prompt_len, output_len, num_preemptions, cached_tokens) and
    the float ones (arrival_s, first_scheduled_s, first_token_s, finished_s, dispatched_s) of the
    record of a turn never released: not started, its session's start as its arrival."""
    nan = math.nan
    return (spec.request_id, spec.prompt_len, spec.output_len, 0, 0), (spec.arrival_s, nan, nan, nan, nan)
