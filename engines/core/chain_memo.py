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

from typing import TYPE_CHECKING, Any, Final

from engines.compiled import mypyc_attr

if TYPE_CHECKING:  # (annotations only, never read at run time: running the source needs no mypy_extensions)
    from mypy_extensions import i64  # a native 64-bit int in the compiled build (its arithmetic wraps: -fwrapv)

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
            native = COMPILED and abs(seg) < _MODULUS and 0 <= off and off + count * bs < _MODULUS  # (ints hashing to themselves)
            found = tuple(_chain(last, seg, off, count, bs) if native else _hashed(last, seg, off, count, bs))
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


def _hashed(last: int, seg: int, off: int, count: int, bs: int) -> list[Any]:
    """ChainMemo.chain's hashes by their definition, Python's `hash` of the tuples."""
    # Any, not int: the compiled build would box each hash twice (into its tuple, into the list) and
    # seg and bs at every block; as objects each is boxed once. (A plain count: the compiled build
    # iterates a stepped range as Python objects.)
    out: list[Any] = []
    prev: Any = last
    s: Any = seg
    size: Any = bs
    o = off
    for _ in range(count):
        prev = hash((prev, (s, o, size)))
        out.append(prev)
        o += bs
    return out


# CPython's hash of a tuple (Objects/tupleobject.c, tuplehash: xxHash's round over the items' hashes
# in unsigned 64-bit arithmetic) and of an int (Python/pyhash.c's definition: sign * (|v| mod 2**61 - 1),
# -1 read as -2), on 64-bit builds, in i64: the compiled build's arithmetic wraps as the unsigned one
# does (-fwrapv); the source's ints do not, so each step that may leave 64 bits is wrapped (W below).
# Written out, not as helpers: the compiled build calls a module's functions through the PLT, and
# reads a module-level constant past 62 bits as an object, converted at every use.
_MODULUS: Final = (1 << 61) - 1
COMPILED: Final = type(_hashed).__name__ != "function"  # whether this module runs compiled (mypyc)


def _chain(last: i64, seg: i64, off: i64, count: i64, bs: i64) -> list[Any]:
    """_hashed's hashes, the same values, without a tuple: hash((prev, (seg, o, bs))) block by block
    (|seg|, o and bs below the modulus: each hashes to itself). W(x): x - ((((x >> 63) + 1) >> 1) << 64),
    x modulo 2**64 as a signed value (the shift by 64 as two of 32: by 64 at once is undefined in C)."""
    p1: i64 = -7046029288634856825  # _PyHASH_XXPRIME_1, 11400714785074694791 - 2**64
    p2: i64 = -4417276706812531889  # _PyHASH_XXPRIME_2, 14029467366897019727 - 2**64
    p5: i64 = 2870177450012600261  # _PyHASH_XXPRIME_5
    m: i64 = 2305843009213693951  # the modulus, 2**61 - 1
    low: i64 = 0x7FFFFFFF
    out: list[Any] = []
    prev: i64 = last
    inner: i64 = 0
    h: i64 = 0
    # the inner tuple's first round (its seg lane) is every block's
    a = p5 + seg * p2
    a -= (((a >> 63) + 1) >> 1 << 32) << 32
    a = (a << 31) | ((a >> 33) & low)
    a -= (((a >> 63) + 1) >> 1 << 32) << 32
    a *= p1
    first = a - ((((a >> 63) + 1) >> 1 << 32) << 32)
    o = off
    end = off + count * bs
    while o < end:  # (not a range: the compiled build would box its counter)
        a = first
        a += o * p2
        a -= (((a >> 63) + 1) >> 1 << 32) << 32
        a = (a << 31) | ((a >> 33) & low)
        a -= (((a >> 63) + 1) >> 1 << 32) << 32
        a *= p1
        a -= (((a >> 63) + 1) >> 1 << 32) << 32
        a += bs * p2
        a -= (((a >> 63) + 1) >> 1 << 32) << 32
        a = (a << 31) | ((a >> 33) & low)
        a -= (((a >> 63) + 1) >> 1 << 32) << 32
        a *= p1
        a -= (((a >> 63) + 1) >> 1 << 32) << 32
        a += 3 ^ (p5 ^ 3527539)
        a -= (((a >> 63) + 1) >> 1 << 32) << 32
        if a == -1:  # (an if, not a conditional expression: the compiled build would box its value)
            a = 1546275796
        inner = a
        # the outer tuple: hash(prev), then the inner's
        # (mod m without a division: 2**61 is 1 mod m, so x is (x & m) + (x >> 61) for 0 <= x < 2**63)
        if prev >= 0:
            h = (prev & m) + (prev >> 61)
            if h >= m:
                h -= m
        else:
            u = -(prev + 1)  # |prev| - 1 (-prev overflows at -2**63)
            h = (u & m) + (u >> 61) + 1
            if h >= m:
                h -= m
            h = -h
            if h == -1:
                h = -2
        a = p5 + h * p2
        a -= (((a >> 63) + 1) >> 1 << 32) << 32
        a = (a << 31) | ((a >> 33) & low)
        a -= (((a >> 63) + 1) >> 1 << 32) << 32
        a *= p1
        a -= (((a >> 63) + 1) >> 1 << 32) << 32
        a += inner * p2
        a -= (((a >> 63) + 1) >> 1 << 32) << 32
        a = (a << 31) | ((a >> 33) & low)
        a -= (((a >> 63) + 1) >> 1 << 32) << 32
        a *= p1
        a -= (((a >> 63) + 1) >> 1 << 32) << 32
        a += 2 ^ (p5 ^ 3527539)
        a -= (((a >> 63) + 1) >> 1 << 32) << 32
        if a == -1:
            a = 1546275796
        prev = a
        out.append(prev)
        o += bs
    return out
