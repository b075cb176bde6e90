"""Parked turns: a prefix cache's session turns freed as one group each (prefix_cache.py holds one).

A turn that a later turn continues, and that alone holds its blocks, is freed parked: its cached
blocks are evictable as one group at the free's place in the LRU order (its stamp, the group's
`key`), and its next turn takes its hint back as one slice. One whose leading blocks other
sequences hold too (a system prompt shared by sessions running at once; only leading ones, for
hits lead) parks the rest the same way (`park_shared`), its next turn taking them back as a
slice past that lead, which it takes singly. Any other free parks the blocks it
leaves unused the same way (`park_rest`), as a group no turn takes back: a per-block LRU entry
costs an insert and a pop of an OrderedDict node each (some 130 ns a block, a fleet's day evicts
millions), a group's a store and a read. Eviction reads a group tail first, past
blocks a stranger's hit took out of it singly, so every decision is the one per-block books make
(tests/test_parked_turns.py runs both).

The group holds its blocks' references: a parked block keeps reference count 1 (the group's), so
parking writes no count and a take-back none either, the hold passing to the next turn as it is. A
parked block is told by its mark: `mark[b]` is the id of the group that holds it, where
`groups` has that id. Marks are written per block only for blocks new to a session: a turn that
took its previous turn's slice back parks under that group's id, whose marks its leading blocks
still carry, and marks only the blocks after them (its own). An id is in `groups` only while
its group is parked, and then exactly its parked blocks carry it: a take-back that leaves blocks
in the group moves those to a fresh id, a block leaving a group singly (a stranger's hit,
eviction, the free list) is unmarked, and a turn freed otherwise retires its id for good (as does
a group whose blocks all leave it at once, `unpark`: they keep its id, which no group has again).

`ParkedTurns` owns that state: `by_key` (groups oldest first), `groups` (the same by id),
`blocks` (parked, over all groups), `mark`, `oldest` and `first` (the first group's key, and it), `live` (by id, the
tokens of the running turn that took that group's slice back: a stranger's hit on one of those
blocks flags it `shared`, so its free reads their reference counts again) and fresh ids. The
block manager's own books it updates as a free or an eviction does (reference counts, the free
list) and reads (the blocks' hashes) are handed to it once, at its creation, as the same lists:
its per-block loops read them as locals, never through the block manager.

Group ids are held as objects (`object`, not `int`): the compiled build (engines/compiled.py) boxes
an int anew at every store into a list, so marks typed `int` each held an object of their own
(allocated at the park, freed at the eviction, each read a miss); typed `object`, a group's marks
all point to its one id.
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from itertools import count
from typing import Any

from engines.compiled import mypyc_attr
from engines.core.sequence import Sequence

NONE_PARKED = 1 << 62  # the oldest group's key when none is parked (frees never number as many)


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)  # (engines/compiled.py)
class ParkedTurn:
    """A freed turn's blocks, evictable as one group: those of table[lo:hi] whose mark is this
    group's `id`; at `key` in the LRU order; evicted from hi down, taken from lo up."""

    __slots__ = ("key", "id", "table", "lo", "hi", "live", "whole")

    def __init__(self, key: int, gid: object, table: list[int], live: int, whole: int, lead: int = 0) -> None:
        self.key = key
        self.id = gid
        self.table = table
        self.lo = lead  # (a shared lead, park_shared's: the blocks before it were other sequences' too)
        self.hi = len(table)
        self.live = live  # blocks still parked here
        self.whole = whole  # the leading blocks all parked here (the first uncached one went to the free list)


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)  # (engines/compiled.py)
class ParkedTurns:
    """The parked groups of one prefix cache (PrefixCachingBlockManager), over its blocks' books."""

    __slots__ = ("by_key", "groups", "blocks", "mark", "oldest", "first", "live", "led", "_starts", "_ids", "_ref",
                 "_hash", "_free", "_id_of")

    def __init__(self, ref: list[int], hashes: list[int | None], free: list[int], id_of: list[Any]) -> None:
        """Nothing parked, over the block manager's reference counts, hashes and free list (the same
        lists, which it never rebinds: a park writes counts and the free list as a free would), and
        its blocks' ids as objects (`id_of[b]`, what it stores for block b: prefix_cache.py)."""
        self._ref, self._hash, self._free, self._id_of = ref, hashes, free, id_of
        self.by_key: OrderedDict[int, ParkedTurn] = OrderedDict()  # the groups, oldest first
        self.groups: dict[object, ParkedTurn] = {}  # the same groups by id: what a parked block's mark names
        self._ids: Iterator[int] = count(1 << 40)  # fresh group ids (a group's first id is its key, a free's stamp: fewer)
        self.live: dict[object, object] = {}  # a group id -> the tokens of the live turn that took its slice back
        self.blocks = 0  # blocks parked, over all groups
        self.mark: list[object] = [-1] * len(ref)  # per block: the id of the group that holds it, if `groups` has it
        self.oldest = NONE_PARKED  # the first group's key
        self.first: ParkedTurn | None = None  # and the group (evictions read it: no iterator over by_key each)
        self.led: dict[int, ParkedTurn] = {}  # id(its table) -> a group parked after a shared lead, until taken back
        self._starts: dict[object, int] = {}  # a live turn's group id -> where its slice starts, if past a shared lead

    def take_back(self, tokens, hinted: int) -> tuple[int, int]:
        """Take the `hinted` hits that lead a turn's hint (`tokens.hint`) back from the group its
        previous turn was parked in, as one slice (their references are the group's: they pass to
        the turn as they are): where the slice starts and ends (the hits before and after it are
        taken singly; before it: a shared lead, park_shared's)."""
        tokens.taken = 0
        hint = tokens.hint
        m = hinted
        if not m or hint is None:
            return 0, 0
        p = self.hint_group(hint)
        # The group must be unevicted up to m. A leading block that went to the free list (uncached)
        # and holds a wanted hash again was cached since by another sequence: the slice stops before it.
        if p is None or m > min(p.hi, p.whole) or m <= p.lo:
            return 0, 0
        tokens.taken, tokens.group, tokens.shared = m, p.id, False  # those blocks carry its id: parked again, the turn keeps it
        self.live[p.id] = tokens
        lo = p.lo
        if lo:
            self._starts[p.id] = lo
            del self.led[id(hint)]
        p.lo = m
        self.blocks -= m - lo
        p.live -= m - lo
        if not p.live:
            self._drop(p)
        else:  # what stays parked moves to a fresh id, so that one is this turn's alone
            old = p.id
            new: object = next(self._ids)  # (boxed once: the marks below all point to it)
            mark = self.mark
            for b in p.table[m:p.hi]:
                if mark[b] == old:
                    mark[b] = new
            del self.groups[old]
            p.id = new
            self.groups[new] = p
        return lo, m

    def release(self, gid: object) -> int:
        """A live turn that took a slice back (its group id `gid`) is freed: where its slice started."""
        del self.live[gid]
        return self._starts.pop(gid, 0) if self._starts else 0

    def hint_group(self, hint: list[int]) -> ParkedTurn | None:
        """The group `hint` (a turn's freed table, its leading block within this engine) is still
        parked as, holding its leading block: hits lead, so a block taken out of it singly was taken
        with every block before it, and a hint is handed over once, so nothing took a slice before."""
        p = self.groups.get(self.mark[hint[0]])
        if p is not None and p.table is hint:
            return p
        p = self.led.get(id(hint)) if self.led else None  # parked after a shared lead: its first own block
        return p if p is not None and p.table is hint and self.mark[hint[p.lo]] == p.id else None

    def unpark(self, blocks: list[int]) -> None:
        """Take parked `blocks` out of their groups singly (a stranger's hits,
        or a hint's past a group's slice): their references, the groups', are now the hitter's. An
        admission's at once: a session's first turn hits a system prompt's blocks parked by the turn
        before (a fleet's replica-day unparks millions), and no other hit's branch reads a group's
        count. Where they are all of one group's blocks (a turn that shared a system prompt, parked
        by park_rest, read back whole by its next turn), the group goes at once, its blocks keeping
        its id as their mark: an id no group will have again."""
        groups, mark = self.groups, self.mark
        if not blocks:
            return
        seen = mark[blocks[0]]
        p = groups[seen]
        if p.live == len(blocks) and list(map(mark.__getitem__, blocks)).count(p.id) == len(blocks):
            self.blocks -= len(blocks)
            p.live = 0
            self._drop(p)
            return
        for b in blocks:
            if mark[b] is not seen:  # (runs of them share a group)
                seen = mark[b]
                p = groups[seen]
            mark[b] = -1
            p.live -= 1
            if not p.live:
                self._drop(p)
        self.blocks -= len(blocks)

    def _drop(self, p: ParkedTurn) -> None:
        """A group nothing is parked in any more."""
        by_key = self.by_key
        del by_key[p.key]
        del self.groups[p.id]
        if self.led and self.led.get(id(p.table)) is p:
            del self.led[id(p.table)]
        if p is self.first:
            self.first = first = next(iter(by_key.values()), None)
            self.oldest = first.key if first is not None else NONE_PARKED

    def evict(self, want: int, out: list[int], cache: dict[Any, Any] | None) -> None:
        """Append up to `want` of the oldest group's blocks to `out`, the next to go first (its table
        read tail first, past blocks taken out of it): all of a group's blocks go before anything
        freed later. Each keeps its reference count, the group's hold, which passes to the taker.
        With `cache` (the block manager's hash table), each block's hash leaves it as the block
        goes (in the same pass, not a second one over `out`)."""
        p: ParkedTurn = self.first  # type: ignore[assignment]  # (one is parked: the caller saw blocks)
        mark, table, gid, id_of, hashes = self.mark, p.table, p.id, self._id_of, self._hash
        hi, live, left = p.hi, p.live, want
        while live and left:
            hi -= 1
            b = table[hi]
            if mark[b] == gid:
                mark[b] = -1
                out.append(id_of[b])
                if cache is not None:
                    del cache[hashes[b]]
                    hashes[b] = None
                live -= 1
                left -= 1
        p.hi, p.live = hi, live
        self.blocks -= want - left
        if not live:
            self._drop(p)

    def evict_one(self) -> int:
        """evict(1), shortened: the oldest group's next block (a warm cache's decode takes one at a time)."""
        p: ParkedTurn = self.first  # type: ignore[assignment]
        mark, table, gid = self.mark, p.table, p.id
        hi = p.hi - 1
        while mark[table[hi]] != gid:  # past blocks taken out of it singly
            hi -= 1
        b = table[hi]
        mark[b] = -1
        p.hi = hi
        p.live -= 1
        self.blocks -= 1
        if not p.live:
            self._drop(p)
        return b

    def park_turn(self, seq: Sequence, key: int, taken: int, start: int) -> bool:
        """Park a turn that a later turn continues, if its blocks allow: all held by it alone (park),
        or all but a shared lead (park_shared); whether it did (else park_rest frees it). `start`,
        `taken`: the slice it took back from its previous turn's group."""
        table = seq.block_table
        if self.held_alone(table, start, 0 if seq.tokens.shared else taken):  # type: ignore[union-attr]
            self.park(seq, key, taken, start)
            return True
        ref, n = self._ref, len(table)
        lead = 0  # the shared lead: the blocks before the first held alone (a native loop, no tuple of counts)
        while lead < n and ref[table[lead]] != 1:
            lead += 1
        if not lead or lead == n:
            return False
        for i in range(lead, n):
            if ref[table[i]] != 1:  # a shared block past one held alone
                return False
        self.park_shared(seq, key, lead)
        return True

    def held_alone(self, table: list[int], start: int, unhit: int) -> bool:
        """Whether a turn's blocks are all held by it alone (reference count 1 each), table[start:unhit]
        known to be: the blocks it took back from its previous turn's group, when no other
        sequence hit one since (admit tells it, by their mark): they came with count 1, and only a
        hit raises it."""
        ref, n = self._ref, len(table)
        for i in range(start if unhit else n):  # a native loop: no slice, no tuple of ~300 counts
            if ref[table[i]] != 1:  # where a shared block is, mostly: a system prompt's, first
                return False
        for i in range(unhit if unhit else n, n):
            if ref[table[i]] != 1:
                return False
        return True

    def park(self, seq: Sequence, key: int, taken: int, start: int = 0) -> None:
        """Free a turn's blocks, which it alone held, as a group: the cached ones evictable at this
        free's place in the order (their references now the group's), the others back on the free
        list (as a free would put them). Marks are written only outside the blocks [start:taken] the
        turn took back from its previous turn's group: those carry that group's id, which this group
        takes over."""
        table, mark = seq.block_table, self.mark
        gid: object = seq.tokens.group if taken else key  # type: ignore[union-attr]
        for b in table[taken:] if taken else table:
            mark[b] = gid
        for b in table[:start] if taken else ():
            mark[b] = gid
        self._park_own(seq, key, gid, 0)

    def park_shared(self, seq: Sequence, key: int, lead: int) -> None:
        """park, for a turn whose first `lead` blocks other sequences hold too (a shared system
        prompt's; only they, for hits lead): those lose its reference, the rest are parked as a group
        of a fresh id whose slice starts past them, so its next turn takes them back at once. Every
        decision is park_rest's (the same group, the same blocks to the free list in its order)."""
        table, mark, ref = seq.block_table, self.mark, self._ref
        gid: object = key
        for b in table[:lead]:
            ref[b] -= 1
        for b in table[lead:]:
            mark[b] = gid
        self._park_own(seq, key, gid, lead)

    def _park_own(self, seq: Sequence, key: int, gid: object, lead: int) -> None:
        """The blocks past `lead` of a turn held by it alone, marked `gid`: the cached ones a group,
        the others to the free list."""
        table, mark = seq.block_table, self.mark
        if seq.blocks_unregistered:  # a block register went through stayed uncached: find them all
            held = list(map(self._hash.__getitem__, table))
            whole = held.index(None) if None in held else len(table)
            loose = [table[i] for i in range(len(table) - 1, whole - 1, -1) if held[i] is None]
        else:  # those blocks are all cached (hits, or registered), the ones past them (a partial last) not
            whole = seq.blocks_hashed
            loose = table[whole:]
            loose.reverse()
        if loose:  # back on the free list, tail first
            free, ref, id_of = self._free, self._ref, self._id_of
            for b in loose:
                free.append(id_of[b])
                mark[b] = -1
                ref[b] = 0
        if len(loose) < len(table) - lead:
            self._add(ParkedTurn(key, gid, table, len(table) - lead - len(loose), whole, lead))
            if lead:
                self.led[id(table)] = self.groups[gid]

    def park_rest(self, table: list[int], key: int) -> None:
        """Free a table's blocks as the block manager books them singly, but with those that become
        evictable parked as one group at `key` (their references now the group's) rather than one LRU
        entry each: a turn no later turn takes back, or one holding a block another sequence holds too
        (a shared system prompt's). Shared blocks only lose this sequence's reference; uncached ones go
        to the free list. The group is read tail first past what it does not hold, as the entries
        would have been, so every decision is the per-block books' (tests/test_parked_turns.py); no
        later turn takes it back (`whole` 0: `take_back` finds no slice)."""
        ref, hashes, mark, free, id_of = self._ref, self._hash, self.mark, self._free, self._id_of
        gid: object = key
        held = 0
        for b in reversed(table):  # tail first, as the singly booked free goes
            r = ref[b]
            if r != 1:
                ref[b] = r - 1
            elif hashes[b] is None:
                free.append(id_of[b])
                ref[b] = 0
            else:
                mark[b] = gid
                held += 1
        if held:
            self._add(ParkedTurn(key, gid, table, held, 0))

    def _add(self, group: ParkedTurn) -> None:
        """A new group, the youngest."""
        if not self.by_key:
            self.oldest, self.first = group.key, group
        self.by_key[group.key] = group
        self.groups[group.id] = group
        self.blocks += group.live

    def order(self) -> list[tuple[int, int]]:
        """(block, group key) of every parked block, each group's next to be evicted first."""
        mark, out = self.mark, []
        for p in self.by_key.values():
            out += [(b, p.key) for b in reversed(p.table[p.lo:p.hi]) if mark[b] == p.id]
        return out
