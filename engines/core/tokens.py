"""What a sequence's tokens are, as far as a prefix cache needs to know: one hash per full KV block.

A block's hash covers its tokens and, through its parent's hash, every token before it (vLLM's
automatic prefix caching chains them the same way), so two sequences share block i's hash exactly
when they share their first (i + 1) x block_size tokens (up to a 64-bit collision, as in vLLM).
Hashes are Python's `hash` of tuples of ints: the same in every process (only str hashing is
salted), so a simulation is reproducible bit for bit.

Two ways to say what the tokens are:
  TokenIds   the ids themselves (the server: the prompt, then each generated id as it is sampled);
  Segments   ids never materialized (the simulator): runs of (segment id, length), where token j of
             segment s is the same token wherever s appears and segments never share a token. A
             conversation's turn n+1 holds turn n's segments, so its blocks hash as turn n's did.
Both compute a hash only when asked and keep it (a prompt is hashed once however often it is
looked up); Segments hashes a run's whole blocks together (all of them are full, so asking for one
may hash the rest of its run: they cost one memo lookup, chain_memo.py).

A session's next turn (the simulator's conversations and agents) holds its previous turn's tokens:
built `after` them, Segments takes the hashes the previous turn computed (handed over, as its
blocks are) instead of recomputing them, and, where the previous turn was marked `continued`, the blocks that held them when it was
freed (`hint`, handed over once): the prefix cache tries those blocks first and checks each against
the hash it must hold (prefix_cache.py), so a hint is never trusted, only verified.
"""
from __future__ import annotations

from collections.abc import Iterable
from operator import itemgetter

from engines.compiled import mypyc_attr
from engines.core.chain_memo import ChainMemo

ROOT_HASH = 0x5EED_CAFE  # the parent hash of a sequence's first block
# Segments' runs of whole blocks, shared by every sequence of the process (chain_memo.py: a pure
# function's memo, bounded); a conversation's next turn finds its earlier turns' runs here.
MEMO = ChainMemo()
_length = itemgetter(1)  # of a run: (segment id, tokens)


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)  # (engines/compiled.py)
class TokenIds:
    __slots__ = ("ids", "hashes", "block_size", "continued", "freed_table", "hint", "inherited", "taken", "group",
                 "shared")

    def __init__(self, ids: Iterable[int], block_size: int) -> None:
        self.ids = list(ids)
        self.hashes: list[int] = []
        self.block_size = block_size
        self.continued = False  # a server does not know a session's next turn
        self.freed_table: list[int] | None = None
        self.hint: list[int] | None = None
        self.inherited = 0
        self.taken = 0  # (the prefix cache's: leading blocks taken back from a parked group, parked_turns.py)
        self.group: object = -1
        self.shared = False

    def append(self, token: int) -> None:
        self.ids.append(token)

    def block_hash(self, i: int) -> int:
        """The hash of full block `i` (its tokens must be known)."""
        h = self.hashes
        bs = self.block_size
        while len(h) <= i:
            j = len(h)
            if (j + 1) * bs > len(self.ids):
                raise IndexError(f"block {j} is not full: {len(self.ids)} tokens known")
            h.append(hash((h[-1] if h else ROOT_HASH, tuple(self.ids[j * bs:(j + 1) * bs]))))
        return h[i]


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)  # (engines/compiled.py)
class Segments:
    __slots__ = ("runs", "hashes", "block_size", "_run", "_offset", "continued", "freed_table", "hint", "inherited",
                 "taken", "group", "shared")
    runs: tuple[tuple[int, int], ...]  # (declared: __init__ reads `after`'s before it sets its own)
    block_size: int

    def __init__(self, runs: tuple[tuple[int, int], ...], block_size: int, after: Segments | None = None,
                 continued: bool = False) -> None:
        """`after`: the tokens of the turn these continue (taken only if its runs lead these);
        `continued`: a later turn will continue these (the prefix cache then keeps the blocks
        they held when freed, `freed_table`, for that turn's `hint`)."""
        # (segment id, tokens) in order: the prompt's, then the output's; empty ones dropped (checked
        # first at C speed: an agent's prompt holds dozens of runs, and all are usually non-empty; those
        # past `after`'s only, where its runs, all non-empty, lead these)
        runs = tuple(runs)
        n = len(after.runs) if after is not None and after.block_size == block_size else 0
        led = n > 0 and after is not None and runs[:n] == after.runs
        rest = runs[n:] if led else runs
        self.runs = runs if not rest or min(map(_length, rest)) > 0 else tuple(r for r in runs if r[1] > 0)
        self.hashes: list[int] = []
        self.block_size = block_size
        self._run = 0  # where the next block to hash starts: run index and offset in it
        self._offset = 0
        self.continued = continued
        self.freed_table: list[int] | None = None  # set by the prefix cache when `continued`
        self.hint: list[int] | None = None  # the blocks `after` held when freed, leading block first
        self.inherited = 0  # leading hashes taken from `after` (its blocks held exactly these, cached)
        self.taken = 0  # leading blocks the prefix cache took back from `after`'s parked group, and its id
        self.group: object = -1  # (parked_turns.py: a turn parked again keeps that id, one object)
        self.shared = False  # whether another sequence hit one of those blocks since
        if after is not None and after.block_size == block_size:
            self.hint, after.freed_table = after.freed_table, None
            if led or self.runs[:n] == after.runs:  # every token of `after` leads these: so do its blocks' hashes,
                # handed over, not copied (a day's turns would hold ~300 each twice, every one touched);
                # `after` hashes again from its first block if ever asked
                self.hashes, after.hashes = after.hashes, []
                self.inherited = len(self.hashes)
                self._run, self._offset = after._run, after._offset
                after._run = after._offset = 0

    def block_hash(self, i: int) -> int:
        h = self.hashes
        if i < len(h):
            return h[i]
        runs, bs = self.runs, self.block_size
        r, off = self._run, self._offset
        while len(h) <= i:
            if r < len(runs) and runs[r][1] - off >= bs:  # the common case: whole blocks inside one segment
                seg, length = runs[r]
                count = (length - off) // bs  # all of the run's whole blocks, though fewer may be asked:
                h += MEMO.chain(h[-1] if h else ROOT_HASH, seg, off, count, bs)  # all full, one memo lookup
                off += count * bs
                if off == length:
                    r, off = r + 1, 0
                continue
            need = bs
            key: list[int] = []  # (segment, first offset, tokens) of each piece of the block
            while need:
                if r >= len(runs):
                    raise IndexError(f"block {len(h)} is not full: the segments hold fewer tokens")
                seg, length = runs[r]
                take = min(need, length - off)
                key += (seg, off, take)
                need -= take
                off += take
                if off == length:
                    r, off = r + 1, 0
            h.append(hash((h[-1] if h else ROOT_HASH, tuple(key))))
        self._run, self._offset = r, off
        return h[i]
