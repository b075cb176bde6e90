"""The prefix cache's unused cached blocks, least recently freed first: an LRU order kept as an
append-only log with lazy deletion, so that a sequence's hundreds of blocks enter and leave it in a
few array operations instead of one dictionary operation each.

A block entering the order is appended to the log and stamped with its entry's position there; a
block leaving it (reused as a hit, or evicted) has its stamp cleared. An entry is live iff its
block's stamp still names it, so a block freed, reused and freed again has one live entry, its
latest, exactly where an ordered dict would have moved it: the live entries, in log order, are the
ordered dict's keys in order (tests/test_eviction_order.py checks this against an OrderedDict).
Dead entries are skipped when the oldest are taken and dropped when the log is compacted (when it
fills: it holds 8 entries a block, so each entry is copied at most once in 7 adds, amortized).
"""
from __future__ import annotations

from collections import deque

import numpy as np

_NOT_HELD = -1  # the stamp of a block that is not in the order
_MIN_WINDOW = 64  # log entries read ahead at once when taking the oldest
_LOG_BLOCKS = 8  # the log's entries per block: compacted when full, after at least 7x the blocks were added


class EvictionOrder:
    __slots__ = ("_stamp", "_log", "_head", "_tail", "_len", "_ready")

    def __init__(self, num_blocks: int) -> None:
        self._stamp = np.full(num_blocks, _NOT_HELD, dtype=np.int64)  # each block's live entry's index in _log
        self._log = np.empty(_LOG_BLOCKS * max(num_blocks, _MIN_WINDOW), dtype=np.intp)
        self._head = 0  # entries before it are dead
        self._tail = 0  # the next entry's position
        self._len = 0  # live entries: blocks in the order
        self._ready: deque[tuple[int, int]] = deque()  # (position, block) of entries read ahead of _head, oldest first

    def __len__(self) -> int:
        return self._len

    def add(self, blocks: np.ndarray) -> None:
        """Blocks (not in the order, distinct) become its newest, the last of them newest of all."""
        n = len(blocks)
        if self._tail + n > len(self._log):
            self._compact()
        self._log[self._tail:self._tail + n] = blocks
        self._stamp[blocks] = np.arange(self._tail, self._tail + n)
        self._tail += n
        self._len += n

    def discard(self, blocks: np.ndarray) -> None:
        """Blocks (in the order, distinct) leave it."""
        self._stamp[blocks] = _NOT_HELD
        self._len -= len(blocks)

    def pop_oldest(self, n: int) -> list[int]:
        """The n blocks longest in the order, oldest first, taken out of it."""
        if n > self._len:
            raise ValueError(f"{n} blocks asked of an eviction order holding {self._len}")
        out: list[int] = []
        ready, stamp = self._ready, self._stamp
        while len(out) < n:
            while not ready:  # a window may hold no live entry
                self._read_ahead(n - len(out))
            p, b = ready.popleft()
            if stamp[b] == p:  # still live: it may have left the order since it was read ahead
                stamp[b] = _NOT_HELD
                out.append(b)
        self._len -= n
        return out

    def _read_ahead(self, need: int) -> None:
        """The live entries of the next window of the log, queued (most takes are of one block: a
        decode's next one, where a window read per take would cost more than the take)."""
        lo = self._head
        window = self._log[lo:min(self._tail, lo + max(2 * need, _MIN_WINDOW))]
        if not len(window):
            raise RuntimeError("the eviction order's count and its log disagree")
        positions = np.arange(lo, lo + len(window))
        live = self._stamp[window] == positions
        self._ready.extend(zip(positions[live].tolist(), window[live].tolist()))
        self._head += len(window)

    def blocks(self) -> list[int]:
        """The blocks in the order, oldest first (for audits and tests)."""
        return self._live().tolist()

    def _live(self) -> np.ndarray:
        head = self._ready[0][0] if self._ready else self._head  # entries read ahead are still in the log
        window = self._log[head:self._tail]
        return window[self._stamp[window] == np.arange(head, self._tail)]

    def _compact(self) -> None:
        """Drop the dead entries: the live ones move to the log's front, in order, restamped
        (every other block's stamp is already _NOT_HELD, so no stamp names a moved entry)."""
        live = self._live()  # a copy
        self._log[:len(live)] = live
        self._stamp[live] = np.arange(len(live))
        self._head, self._tail = 0, len(live)
        self._ready.clear()  # read-ahead entries name old indices: they are among `live`, renumbered
