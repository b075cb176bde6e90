"""The releases still to come in a run with sessions (sessions.SessionRelease): first turns at
their planned times, later turns `think_s` after the turn before finishes.

First turns are sorted once and taken in order; finishes push later turns on a small heap (a
replica-day's one heap of every first turn made each release a deep pop); the next release is
the lesser head, (time, input index) as one heap of both would order them. Compiled with the
engine core (engines/compiled.MODULES): the stepping (stepping.py) asks it every step whether a
release is due and when the next one comes, natively, where the run's own methods are Python.
"""
from __future__ import annotations

import heapq
import math
from typing import Any

from engines.compiled import mypyc_attr
from engines.core import Sequence


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)  # (engines/compiled.py)
class Releases:
    def __init__(self, firsts: list[Any], successor: list[int], think: list[Any], order: list[int]) -> None:
        self.firsts = firsts  # (arrival_s, input index) of each first turn, sorted
        self.taken = 0  # first turns released so far
        self.pending: list[Any] = []  # (release time, input index) of later turns, a heap
        self.successor = successor  # by input index: the turn its finish releases (-1: none)
        self.think = think  # by input index: its think_s
        self.order = order  # rank -> input index (the run's, as released)

    def next_time(self) -> float:
        """When the next release comes (math.inf: none is known)."""
        k, pending = self.taken, self.pending
        if k < len(self.firsts):
            first: float = self.firsts[k][0]
            return first if not pending or first < pending[0][0] else pending[0][0]
        return pending[0][0] if pending else math.inf

    def take(self) -> tuple[Any, int]:
        """The next release (its time, its input index), taken."""
        firsts, k, pending = self.firsts, self.taken, self.pending
        if k < len(firsts) and (not pending or firsts[k] < pending[0]):
            self.taken = k + 1
            return firsts[k]
        return heapq.heappop(pending)

    def finished(self, seqs: tuple[Sequence, ...], t: float) -> None:
        """`seqs` finished at `t`: the later turns they release come."""
        successor, order, think = self.successor, self.order, self.think
        for seq in seqs:
            j = successor[order[seq.seq_id]]
            if j >= 0:
                heapq.heappush(self.pending, (t + think[j], j))
