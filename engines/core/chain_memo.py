"""A bounded memo of block-hash chains: the whole-block hashes of one run of one segment.

In the simulator a conversation's or agent's turn n+1 holds turn n's segments (tokens.Segments),
so its prompt hashes, block for block, to what turn n's did: without a memo every turn rehashes
its whole prompt (hundreds of blocks) though only its last runs are new. The chain of a run's
whole blocks is a pure function of (the parent hash, segment, first offset, number of blocks,
block size): a memo keyed by all of them can never give a stale answer, and a turn costs one
lookup per run instead of one `hash` per block.

Memory is bounded by two generations (a cheap stand-in for LRU order): entries are added to the
young one; a hit in the old one is copied into the young one; when the young one's weight
reaches half the bound it becomes the old one and the old one is dropped. An entry weighs its
hashes plus ENTRY_WEIGHT for its key, tuple and dict slot, so the memo holds at most `max_weight`
units. One unit is about 44 bytes on 64-bit CPython (a tuple slot, 8 B, and the int it points to,
at most 36 B for a 64-bit hash; the ints are usually shared with the sequences' own hash lists),
an entry's overhead about 300 bytes (an 80-byte key tuple and its ints, the chain tuple's header,
a dict slot): ENTRY_WEIGHT = 8 units covers it. The default bound, 2**19 units, is then at most
about 23 MB however long a run goes (tests/test_chain_memo.py measures the peak, generations'
turns included, under 44 B per unit of the bound for chains of 1 to 200 blocks). A 64-replica
fleet's 300 s in one process turns generations three times and misses no more than an unbounded
memo would (benchmarks/bench_fleet.py's run, counted).
"""
from __future__ import annotations

from typing import Any

from engines.compiled import mypyc_attr

ENTRY_WEIGHT = 8  # an entry's overhead in units of one held hash (about 300 B / 44 B, see above)
DEFAULT_MAX_WEIGHT = 1 << 19  # units: at most about 23 MB (module docstring)


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)  # (engines/compiled.py)
class ChainMemo:
    __slots__ = ("max_weight", "_young", "_old", "_weight")

    def __init__(self, max_weight: int = DEFAULT_MAX_WEIGHT) -> None:
        if max_weight < 2 * ENTRY_WEIGHT:
            raise ValueError(f"a chain memo holds at least two entries' weight, got {max_weight}")
        self.max_weight = max_weight
        self._young: dict[tuple[int, int, int, int, int], tuple[int, ...]] = {}
        self._old: dict[tuple[int, int, int, int, int], tuple[int, ...]] = {}
        self._weight = 0  # the young generation's

    @property
    def weight(self) -> int:
        """Units held now, both generations (at most max_weight)."""
        return self._weight + sum(len(c) + ENTRY_WEIGHT for c in self._old.values())

    def chain(self, last: int, seg: int, off: int, count: int, bs: int) -> tuple[int, ...]:
        """The hashes of `count` whole blocks of segment `seg` from token `off` on, after the block
        hashed `last`: block k's is hash((previous, (seg, off + k * bs, bs))), as tokens.Segments
        hashes a block inside one segment."""
        key = (last, seg, off, count, bs)
        found = self._young.get(key)
        if found is not None:
            return found
        found = self._old.get(key)
        if found is None:
            # Any, not int: the compiled build would box each hash twice (into its tuple, into the
            # list) and seg and bs at every block; as objects each is boxed once. (A plain count:
            # the compiled build iterates a stepped range as Python objects.)
            out: list[Any] = []
            prev: Any = last
            s: Any = seg
            size: Any = bs
            o = off
            for _ in range(count):
                prev = hash((prev, (s, o, size)))
                out.append(prev)
                o += bs
            found = tuple(out)
        self._add(key, found)
        return found

    def _add(self, key: tuple[int, int, int, int, int], chain: tuple[int, ...]) -> None:
        w = len(chain) + ENTRY_WEIGHT
        if 2 * w > self.max_weight:  # larger than a generation: not kept
            return
        if 2 * (self._weight + w) > self.max_weight:  # the young generation is full: it becomes the old one
            self._old, self._young, self._weight = self._young, {}, 0
        self._young[key] = chain
        self._weight += w
