"""Parked turns: the prefix cache's books for a session's turn freed as one group (prefix_cache.py).

A turn that a later turn continues, and that alone holds its blocks, is freed parked: its cached
blocks are evictable as one group at the free's place in the LRU order (its stamp, the group's
`key`), with a per-block mark instead of an insert each, and its next turn takes its hint back as
one slice. Eviction reads a group tail first, past blocks a stranger's hit took out of it singly,
so every decision is the one per-block books make (tests/test_parked_turns.py runs both).
`TurnParking` holds the methods; `PrefixCachingBlockManager` holds the state they use: `_ref`,
`_hash`, `_free`, `_hinted` (its last lookup's hint hits), `_parked` (groups by key, oldest first),
`_parked_blocks`, `_mark` (per block: the key of the group it was parked in last) and
`_oldest_parked`.
"""
from __future__ import annotations

from collections import OrderedDict

from engines.core.sequence import Sequence

NONE_PARKED = 1 << 62  # the oldest group's key when none is parked (frees never number as many)


class ParkedTurn:
    """A freed turn's blocks, evictable as one group: those of table[lo:hi] whose parking mark is
    still this group's `key` (its place in the LRU order); evicted from hi down, taken from lo up."""

    __slots__ = ("key", "table", "lo", "hi", "live", "whole")

    def __init__(self, key: int, table: list[int], live: int, whole: int) -> None:
        self.key = key
        self.table = table
        self.lo = 0
        self.hi = len(table)
        self.live = live  # blocks still parked here
        self.whole = whole  # the leading blocks all parked here (the first uncached one went to the free list)


class TurnParking:
    """PrefixCachingBlockManager's methods for parked turns (the state is the manager's)."""

    _ref: list[int]
    _hash: list[int | None]
    _free: list[int]
    _hinted: int
    _parked: OrderedDict[int, ParkedTurn]
    _parked_blocks: int
    _mark: list[int]
    _oldest_parked: int

    def _take_back_hint(self, seq: Sequence, hits: list[int]) -> int:
        """Take the hits that lead `seq`'s hint back from the group its previous turn was parked
        in, as one slice; how many it took (the rest are taken singly)."""
        hint = seq.tokens.hint if seq.tokens is not None else None
        m = self._hinted
        if not m or hint is None:
            return 0
        p = self._hint_group(hint)
        # The group must be unevicted up to m. A leading block that went to the free list (uncached)
        # and holds a wanted hash again was cached since by another sequence: the slice stops before it.
        if p is None or m > min(p.hi, p.whole):
            return 0
        ref = self._ref
        for b in hint[:m]:  # all parked here (unused): now this sequence's
            ref[b] = 1
        p.lo = m
        self._parked_blocks -= m
        p.live -= m
        if not p.live:
            self._drop(p)
        return m

    def _hint_group(self, hint: list[int]) -> ParkedTurn | None:
        """The group `hint` (a turn's freed table, its leading block within this engine) is still
        parked as, holding its leading block: hits lead, so a block taken out of it singly was taken
        with every block before it, and a hint is handed over once, so nothing took a slice before."""
        p = self._parked.get(self._mark[hint[0]])
        return p if p is not None and p.table is hint else None

    def _unpark(self, b: int) -> None:
        """Take parked block `b` out of its group singly (a stranger's hit, or a hint's past a group's slice)."""
        p = self._parked[self._mark[b]]
        self._mark[b] = -1
        p.live -= 1
        self._parked_blocks -= 1
        if not p.live:
            self._drop(p)

    def _drop(self, p: ParkedTurn) -> None:
        """A group nothing is parked in any more."""
        parked = self._parked
        del parked[p.key]
        if p.key == self._oldest_parked:
            self._oldest_parked = next(iter(parked), NONE_PARKED)

    def _evict_parked(self, p: ParkedTurn) -> int:
        """The oldest group's next block (its table read tail first, past blocks taken out of it)."""
        mark, table, key = self._mark, p.table, p.key
        hi = p.hi - 1
        while mark[table[hi]] != key:
            hi -= 1
        p.hi = hi
        b = table[hi]
        mark[b] = -1
        self._parked_blocks -= 1
        p.live -= 1
        if not p.live:
            self._drop(p)
        return b

    def _park(self, table: list[int], key: int) -> None:
        """Free a turn's blocks, which it alone held, as a group: the cached ones evictable at this
        free's place in the order, the others back on the free list (as free() would put them)."""
        ref, mark = self._ref, self._mark
        for b in table:
            ref[b] = 0
            mark[b] = key
        held = list(map(self._hash.__getitem__, table))
        loose = held.count(None)
        whole = held.index(None) if loose else len(table)
        if loose:  # (usually the last block only: the uncached ones all lie past the first)
            free = self._free
            for i in range(len(table) - 1, whole - 1, -1):
                if held[i] is None:
                    b = table[i]
                    free.append(b)
                    mark[b] = -1
        if loose < len(table):
            if not self._parked:
                self._oldest_parked = key
            self._parked[key] = ParkedTurn(key, table, len(table) - loose, whole)
            self._parked_blocks += len(table) - loose

    def _parked_order(self) -> list[tuple[int, int]]:
        """(block, group key) of every parked block, each group's next to be evicted first."""
        mark, out = self._mark, []
        for p in self._parked.values():
            out += [(b, p.key) for b in reversed(p.table[p.lo:p.hi]) if mark[b] == p.key]
        return out
