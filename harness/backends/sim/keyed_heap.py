"""The least (key, index) of a set of indices whose keys change one at a time.

The session cluster loop (`cluster.run_sessions`) asks, every step, which busy
instance is furthest behind and what the earliest release bound of the others is; scanning all
instances for that made a fleet of N cost N times more per step (issue 39). Only the instance
just advanced or routed to changes, so a heap with lazy deletion answers in O(log N): an entry
is current while its key is the index's key now. Ties go to the lowest index, as `min` over
indices in order does.
"""
from __future__ import annotations

import heapq


class KeyedHeap:
    def __init__(self) -> None:
        self.heap: list[tuple[float, int]] = []
        self.key: dict[int, float] = {}

    def set(self, index: int, key: float | None) -> None:
        """Give `index` the key `key` (None: take it out)."""
        if key is None:
            self.key.pop(index, None)
        elif self.key.get(index) != key:
            self.key[index] = key
            heapq.heappush(self.heap, (key, index))

    def _clean(self) -> None:
        heap, key = self.heap, self.key
        while heap and key.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)

    def least(self) -> tuple[float, int] | None:
        """The least (key, index), or None when no index has a key."""
        self._clean()
        return self.heap[0] if self.heap else None

    def least_key_except(self, index: int, default: float) -> float:
        """The least key of any index but `index` (`default` if none)."""
        self._clean()
        heap, held = self.heap, []
        while heap and heap[0][1] == index:  # a key set, changed and set back leaves two current entries
            held.append(heapq.heappop(heap))
            self._clean()
        out = heap[0][0] if heap else default
        for entry in held:
            heapq.heappush(heap, entry)
        return out
