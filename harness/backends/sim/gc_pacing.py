"""Fewer garbage collections while a simulation runs.

A simulation allocates millions of short-lived, acyclic objects (tuples, floats, lists of a batch)
while its live heap grows with every request (sequences, token times). CPython collects its
youngest generation every 700 net allocations and the older ones after so many of those, each
pass walking objects that are almost never garbage: 9 % of a fleet replica's time (the bench's
replica over 28,800 simulated s: 8.79 CPU s with the default thresholds, 7.99 with no collection,
8.16 with the youngest generation's threshold at 100,000).

During a run the youngest generation is collected every 1,000,000 net allocations and the older
ones after 1,000 young collections (CPython's 10): a young pass walks every young container's
items (a request's token list of thousands of floats among them) and a full one the whole live
heap, which a replica's day grows to millions of containers, and neither finds garbage here.
Collection stays on: cyclic garbage is freed at the next young collection or, if it got old,
once the thresholds are restored after the run. The fleet bench's replica-day (86,400 s, 86,400
requests) collected 6 times young (0.51 CPU s), once middle (0.15) and once fully (0.32) during the
run with the young threshold at 100,000; it now collects not at all, with the same peak memory
(1.50 GB) and records. The records are the same: collection frees memory, it decides nothing.
"""
from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG_THRESHOLD = 1_000_000  # net allocations between collections of the youngest generation (CPython's: 700)
OLDER_THRESHOLD = 1_000  # young collections between collections of the middle one, and so on (CPython's: 10)


@contextmanager
def fewer_collections() -> Iterator[None]:
    old = gc.get_threshold()
    gc.set_threshold(max(old[0], YOUNG_THRESHOLD), max(old[1], OLDER_THRESHOLD), max(old[2], OLDER_THRESHOLD))
    try:
        yield
    finally:
        gc.set_threshold(*old)
