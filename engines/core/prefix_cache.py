"""Automatic prefix caching: KV blocks found again by the hash of the tokens they hold.

A full block whose KV is computed is registered under its hash (engines/core/tokens.py: the hash
covers its tokens and all before them). A sequence being admitted looks its prompt's full blocks
up in order and starts its prefill after the longest cached run; a prompt found whole still
computes its last token (it makes the first output token), as vLLM does, so at most
(prefill_target - 1) // block_size blocks hit. Hit blocks are shared, reference-counted.

A block whose last user leaves keeps its content: with a hash it becomes *evictable* (still
findable, counted as free), without one it goes back to the free list. Allocation takes the free
list first, then evicts the least recently freed cached block (a sequence's blocks are freed tail
first, so its later blocks go before its prefix, as in vLLM). Every block is in exactly one of:
free, evictable, or used (reference count >= 1); `num_free` counts free + evictable.

A free is *parked*: the blocks it makes evictable become one group at its place in the LRU order,
without a per-block insert. A session's turn that a later turn continues (`tokens.continued`) and
that holds its blocks alone (or all but a shared lead) is taken back by the next turn, its leading
blocks (its hint, past that lead) as one slice; any other free parks the blocks nobody else holds. Eviction reads a group tail first, and a
stranger's hit takes a block out of it singly, so every decision is the one the per-block books
make (tests/test_parked_turns.py drives both side by side); a turn re-reads hundreds of blocks,
and this made those reads a store each. The groups are their own object (`parked`: parked_turns.py's
`ParkedTurns`), handed this manager's reference counts, hashes and free list once, as the same lists.

Preemption frees a sequence's blocks like a finish does, after registering what it computed, so
its recompute usually finds its own prefix again; eviction only ever takes blocks nobody uses.
The same block manager serves every caller (the simulator, the in-repo server); without prefix
caching the engine uses the plain `BlockManager`, whose hot paths this class leaves untouched.
"""
from __future__ import annotations

from collections import OrderedDict
from operator import itemgetter
from typing import Any

from engines.compiled import mypyc_attr
from engines.core.block_manager import DEFAULT_BLOCK_SIZE, BlockManager, blocks_for
from engines.core.kv_tier import HostTier
from engines.core.parked_turns import ParkedTurns
from engines.core.prefix_cache_audit import audit_books
from engines.core.prefix_cache_stats import PrefixCacheStats
from engines.core.sequence import Sequence

_FIRST, _SCAN = 8, 64  # hashes looked up at once when finding a prompt's leading hits: first, at most


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)  # (engines/compiled.py)
class PrefixCachingBlockManager(BlockManager):
    def __init__(self, num_blocks: int, block_size: int = DEFAULT_BLOCK_SIZE, watermark: float = 0.01,
                 reserve_tokens: int | None = None, tier: HostTier | None = None) -> None:
        # `tier`: where evicted cached blocks go (kv_tier.py), None: they are dropped
        super().__init__(num_blocks, block_size, watermark, reserve_tokens)
        self.tier = tier
        self._host_hits = 0  # of the last lookup: blocks after its GPU hits found in the tier
        self._hinted = 0  # of the last lookup: its leading hits that its hint gave
        num_blocks = self.num_blocks
        self._ref = [0] * num_blocks
        self._hash: list[int | None] = [None] * num_blocks
        self._cache: dict[int, int] = {}  # hash -> the block holding it
        # Unused cached blocks freed singly (with parks_turns off: the tests' reference books), least
        # recently freed first, each with its free's stamp. An OrderedDict:
        # popping its oldest entry is O(1), where a dict's next(iter(...)) rescans the slots its earlier
        # deletions left. Parked turns' blocks (by stamp, parked_turns.py) are evictable too, in the same order.
        self._evictable: OrderedDict[int, int] = OrderedDict()
        # Each block id as one object, stored wherever the block goes (tables, the free list, the hash
        # table's values): the compiled build boxes an int anew at every store into a list or dict, so
        # each move made a fresh object (freed at the next), its later reads scattered misses.
        self._id_of: list[Any] = self._free[::-1]  # (the free list's own: id_of[b] is b)
        self.parked = ParkedTurns(self._ref, self._hash, self._free, self._id_of)  # the groups freed turns' blocks are parked in
        self._stamp = 0  # frees so far: the next free's place in the LRU order
        self.stats = PrefixCacheStats()
        self._version = 0  # bumped whenever the cache's content changes: lookups are reused until then
        # the last lookup: (seq, target, version), GPU hits, blocks after them in the host tier, and how
        # many of the hits were its hint's
        self._peeked: tuple[tuple[int, int, int], list[int], int, int] = ((-1, -1, -1), [], 0, 0)

    # -- counts ----------------------------------------------------------------------------
    parks_turns = True  # False: every free books its blocks singly (the tests' reference)

    @property
    def num_free(self) -> int:
        return len(self._free) + len(self._evictable) + self.parked.blocks

    @property
    def num_used(self) -> int:
        return self.num_blocks - self.num_free

    @property
    def num_evictable(self) -> int:
        return len(self._evictable) + self.parked.blocks

    def evictable_order(self) -> list[int]:
        """The unused cached blocks, the next to be evicted first."""
        order = list(self._evictable.items()) + self.parked.order()  # (block, stamp)
        order.sort(key=itemgetter(1))  # stable: a free's blocks keep their order
        return [b for b, _ in order]

    @property
    def num_cached(self) -> int:
        """Blocks findable by hash (in use or evictable)."""
        return len(self._cache)

    # -- lookup and admission ----------------------------------------------------------------
    def lookup(self, seq: Sequence) -> list[int]:
        """The cached blocks a sequence about to be admitted would start from (none for one that
        holds blocks, is past its prefill, or whose tokens are unknown); sets its num_computed to
        the tokens they hold, so a policy sizing its first chunk sees what is left to compute."""
        self._host_hits = self._hinted = 0
        if seq.tokens is None or seq.block_table or seq.num_computed >= seq.prefill_target:
            return []
        key, hits, host, hinted = self._peeked
        if key != (seq.seq_id, seq.prefill_target, self._version):
            host = 0
            cache, block_hash = self._cache, seq.tokens.block_hash
            limit = (seq.prefill_target - 1) // self.block_size
            if limit:  # every hash at once, then a plain loop (a method call per block was the fleet's hot spot);
                block_hash(limit - 1)  # these blocks are hashed anyway when they are registered
            hits = self._hinted_hits(seq.tokens, limit)
            hinted = len(hits)
            if hinted < limit:  # (a new list: the hint may be a parked group's table)
                hits = hits + _leading_hits(cache, seq.tokens.hashes, hinted, limit)
            tier = self.tier
            if tier is not None:  # the run goes on in host memory: those blocks are loaded, not computed
                while len(hits) + host < limit and block_hash(len(hits) + host) in tier:
                    host += 1
            self._peeked = ((seq.seq_id, seq.prefill_target, self._version), hits, host, hinted)
        self._host_hits, self._hinted = host, hinted
        seq.num_computed = (len(hits) + host) * self.block_size
        return hits

    def _hinted_hits(self, tokens, limit: int) -> list[int]:
        """The leading blocks of `tokens.hint` (the blocks its session's previous turn held) that
        still hold the hashes these tokens' blocks have: exactly the leading hits the cache's table
        would give (a block holds hash h iff the table maps h to it), compared at C speed."""
        hint = tokens.hint
        m = min(len(hint), limit) if hint else 0
        if not m or hint[0] >= self.num_blocks:  # held on a larger engine (a session routed elsewhere): no hint here
            return []
        # Where the previous turn is still parked, its cached leading blocks up to the first evicted one
        # hold the hashes it computed, which these tokens took (`inherited`): no need to read them.
        # A group parked after a shared lead (parked_turns.park_shared) is sure past that lead only.
        p = self.parked.hint_group(hint)
        lead = min(p.lo, m) if p is not None else 0
        sure = max(lead, min(m, p.hi, p.whole, tokens.inherited)) if p is not None else 0
        if lead and self._holding(hint, tokens.hashes, 0, lead) < lead:
            return hint[:self._holding(hint, tokens.hashes, 0, lead)]
        return hint[:m] if sure == m else hint[:self._holding(hint, tokens.hashes, sure, m)]

    def _holding(self, hint: list[int], hashes: list[Any], a: int, b: int) -> int:
        """a + how many of hint[a:b] hold hashes[a:b], up to the first that does not; a if any of
        hint[a:b] is past this engine's blocks (it holds none). A native loop comparing by identity
        first: a list of the held hashes touched every hash object's count (a miss each, ~400 a turn)."""
        held: list[Any] = self._hash
        n = len(held)
        i = a
        while i < b:
            x = hint[i]
            if x >= n:
                return a
            if held[x] is not hashes[i] and held[x] != hashes[i]:  # (equal hashes are mostly one object)
                break
            i += 1
        for j in range(i, b):
            if hint[j] >= n:
                return a
        return i

    def cached_prefix(self, hashes) -> int:
        """How many of `hashes` (a prompt's chained block hashes, in order) lead a run this cache
        holds now: what a cache-aware router reads (engines.routers); no counter, no LRU order moves."""
        cache, n = self._cache, 0
        for h in hashes:
            if h not in cache:
                break
            n += 1
        return n

    def admission_blocks(self, seq: Sequence) -> int:
        """Free blocks admitting `seq` uses: new ones, plus its hits that sit evictable (taking
        them out of the evictable pool lowers num_free just as allocating would)."""
        hits = self.lookup(seq)
        return self._fresh_blocks(seq, len(hits)) + self._unused(hits)

    def can_admit(self, seq: Sequence) -> bool:
        # BlockManager's test, num_free - admission_blocks >= watermark, counting the unused hits
        # only when it matters: there are at most len(hits) of them, and a warm cache's evictable
        # blocks usually leave room for all (a count per admission was a fleet's hot spot)
        hits = self.lookup(seq)
        room = self.num_free - self.watermark_blocks - self._fresh_blocks(seq, len(hits))
        return room >= len(hits) or room >= self._unused(hits)

    def _unused(self, hits: list[int]) -> int:
        """How many of `hits` no sequence uses (they sit evictable): singly, reference count 0, or
        parked, the reference their group's (parked_turns.py). At C speed: a fleet admits ~350 hits a turn."""
        unused = list(map(self._ref.__getitem__, hits)).count(0)
        groups = self.parked.groups
        if groups:
            unused += len(hits) - list(map(groups.get, map(self.parked.mark.__getitem__, hits))).count(None)
        return unused

    def _fresh_blocks(self, seq: Sequence, hits: int, num_tokens: int | None = None) -> int:
        tokens = num_tokens or max(self.reserve_tokens if self.reserve_tokens is not None else 0, seq.prefill_target)
        return blocks_for(tokens, self.block_size) - len(seq.block_table) - hits

    def admit(self, seq: Sequence, num_tokens: int | None = None) -> None:  # num_tokens: vLLM V1's first chunk's blocks
        hits = self.lookup(seq)
        fresh = self._fresh_blocks(seq, len(hits), num_tokens)
        if fresh + len(hits) > self.num_free and fresh + self._unused(hits) > self.num_free:  # (unused <= hits)
            raise RuntimeError(f"KV over-commit: {seq} needs {fresh} new blocks, {self.num_free} free")
        ref, evictable, parking, parked, id_of = self._ref, self._evictable, self.parked, [], self._id_of
        mark, groups, live = parking.mark, parking.groups, parking.live
        lead, first = parking.take_back(seq.tokens, self._hinted) if seq.tokens is not None else (0, 0)
        seen, held = None, False  # the last mark read, and whether a group holds it (runs of hits share one)
        for lo, hi in ((0, lead), (first, len(hits))):  # the hits singly: a shared lead, then those past the slice
            for i in range(lo, hi):
                b = hits[i]
                if ref[b] == 0:  # evictable singly
                    del evictable[b]
                    ref[b] = 1
                    continue
                if mark[b] is not seen:
                    seen, held = mark[b], mark[b] in groups
                if held:  # parked: its group's reference becomes this sequence's (below, all at once)
                    parked.append(id_of[b])
                else:  # in use: shared now (a live turn holding a slice it took back learns it: _held_alone)
                    ref[b] += 1
                    holder = live.get(mark[b])
                    if holder is not None:
                        holder.shared = True  # type: ignore[attr-defined]
        parking.unpark(parked)
        seq.block_table.extend(hits)
        seq.blocks_hashed, seq.blocks_unregistered = len(hits), 0
        if seq.tokens is not None:
            seq.tokens.hint = None  # used: a readmission looks its blocks up in the table
        host = self._host_hits  # set by the lookup just made
        if seq.tokens is not None and seq.num_computed < seq.prefill_target:
            s = self.stats
            s.queries += seq.prefill_target
            s.hits += len(hits) * self.block_size
            s.query_blocks += (seq.prefill_target - 1) // self.block_size
            s.hit_blocks += len(hits)
            s.host_hits += host * self.block_size
            if seq.num_preemptions == 0:
                seq.cached_tokens = (len(hits) + host) * self.block_size
        if host:  # loaded before this admission's allocation can evict them from the tier
            block_hash = seq.tokens.block_hash
            for i in range(len(hits), len(hits) + host):
                self.tier.load(block_hash(i))  # type: ignore[union-attr]
        self._take(seq, fresh)  # the first `host` fresh blocks receive the loaded KV; registered as computed

    # -- allocation, freeing, registration ------------------------------------------------------
    def grow_run(self, seqs: tuple[Sequence, ...], k: int) -> None:
        """`grow` each of `seqs` by k tokens, in order: a decode run's, most by no block (one call, not one each;
        typed, the compiled build reads their fields directly, and tests the table's reach before dividing)."""
        bs = self.block_size
        for seq in seqs:
            computed = seq.num_computed + k
            if computed > len(seq.block_table) * bs:
                self._take(seq, -(-computed // bs) - len(seq.block_table))

    def _take(self, seq: Sequence, n: int) -> None:
        free = self._free
        if n == 1 and (free or self._evictable or self.parked.blocks):  # a decode's next block, the most frequent take: the path below, shortened
            if free:
                b = free.pop()
                self._ref[b] = 1
            elif self._evictable:  # (blocks freed singly: parks_turns off, the tests' reference books)
                b = self._evict(1, [])[0]
            else:  # a warm cache's free list is empty: the oldest parked group's next block, as _evict(1) takes it
                b = self.parked.evict_one()  # (its count stays 1: the group's hold passes to seq)
                hashes = self._hash
                h = hashes[b]
                if self.tier is not None:
                    self.tier.store(h)  # type: ignore[arg-type]
                del self._cache[h]  # type: ignore[arg-type]
                hashes[b] = None
                self.stats.evictions += 1
                self._version += 1
            seq.block_table.append(self._id_of[b])
            return
        if n > self.num_free:
            raise RuntimeError(f"KV over-commit: {seq} needs {n} blocks, {self.num_free} free")
        k = min(n, len(free))
        table = seq.block_table
        if k:  # the free list first, as the plain BlockManager takes it
            got, ref = free[len(free) - k:], self._ref
            del free[len(free) - k:]
            for b in got:
                ref[b] = 1
            table += got[::-1]
        if n > k:
            self._evict(n - k, table)  # then the least recently freed cached blocks, their content dropped

    def _evict(self, n: int, out: list[int]) -> list[int]:
        """Append the n least recently freed cached blocks to `out`, content dropped (to the tier, if any), counts 1."""
        evictable, parked, ref = self._evictable, self.parked, self._ref
        hashes, cache, tier = self._hash, self._cache, self.tier
        popitem, end = evictable.popitem, len(out) + n
        drop = cache if tier is None else None  # hashes dropped as blocks are taken; a tier's stored after, in order
        while len(out) < end:
            # Blocks freed singly, as long as they are older than every parked group (stamps rise
            # along the OrderedDict, so the first younger one ends the stretch), then a group's
            oldest = parked.oldest
            while evictable and len(out) < end:
                b, stamp = popitem(last=False)
                if oldest < stamp:  # a parked turn is older: b goes back in front
                    evictable[b] = stamp
                    evictable.move_to_end(b, last=False)
                    break
                ref[b] = 1
                out.append(b)
                if drop is not None:
                    del drop[hashes[b]]  # type: ignore[arg-type]
                    hashes[b] = None
            if len(out) < end:
                parked.evict(end - len(out), out, drop)
        for b in out[end - n:] if tier is not None else ():  # their KV copied to host memory instead of lost
            tier.store(hashes[b])  # type: ignore[union-attr, arg-type]
            del cache[hashes[b]]  # type: ignore[arg-type]
            hashes[b] = None
        self.stats.evictions += n
        self._version += 1
        return out

    def free(self, seq: Sequence) -> None:
        self.register(seq)
        table = seq.block_table
        stamp = self._stamp
        self._stamp = stamp + 1
        ref, hashes, free = self._ref, self._hash, self._free
        tokens = seq.tokens
        taken = start = 0
        if tokens is not None and tokens.taken:  # (once: a preempted turn aborted later is freed again)
            taken, tokens.taken = tokens.taken, 0
            start = self.parked.release(tokens.group)
        continued = tokens is not None and tokens.continued
        if tokens is not None and continued:  # for the session's next turn
            tokens.freed_table = table
        if self.parks_turns:
            if not (continued and table and self.parked.park_turn(seq, stamp, taken, start)):
                self.parked.park_rest(table, stamp)
        else:  # (the tests' reference books)
            evictable = self._evictable
            for b in reversed(table):  # tail first: evicted before the prefix
                r = ref[b] - 1
                ref[b] = r
                if r == 0:
                    if hashes[b] is None:
                        free.append(b)
                    else:
                        evictable[b] = stamp
        seq.block_table, seq.blocks_hashed = [], 0

    def register(self, seq: Sequence, num_tokens: int | None = None) -> None:
        """Make `seq`'s full, computed (or, to `num_tokens`, scheduled) blocks findable. A block whose
        hash another block already holds (two requests computed the same prefix at once) stays
        unregistered: freed, it goes back to the free list."""
        tokens, table = seq.tokens, seq.block_table
        n = min((seq.num_computed if num_tokens is None else num_tokens) // self.block_size, len(table))
        first = seq.blocks_hashed
        if tokens is None or first >= n:
            return
        tokens.block_hash(n - 1)  # every hash up to block n - 1 at once
        cache, hashes, id_of = self._cache, self._hash, self._id_of
        chain: list[Any] = tokens.hashes  # (typed: the compiled build indexes it natively, each hash kept as its object)
        skipped = 0
        for i in range(first, n):
            b = table[i]
            if hashes[b] is None:  # (then no hash maps to b: setdefault gives b back iff it stored it, one probe)
                h = chain[i]
                if cache.setdefault(h, id_of[b]) == b:
                    hashes[b] = h
                else:
                    skipped += 1
        self._version += 1
        seq.blocks_hashed = n
        seq.blocks_unregistered += skipped

    # -- a check for tests ------------------------------------------------------------------
    def audit(self, tables: list[list[int]]) -> None:
        """Raise if the books do not balance, given every live sequence's block table (prefix_cache_audit.py)."""
        audit_books(self, tables)


def _leading_hits(cache: dict[int, int], hashes: list[int], start: int, limit: int) -> list[int]:
    """The blocks holding hashes[start], hashes[start + 1], ... up to the first that `cache` lacks
    (at most up to `limit`), looked up at C speed a slice at a time, the slices growing from
    _FIRST to _SCAN (a fleet's turn finds ~300 in a row, or, past its hint, ~13: a miss costs at
    most one slice's lookups past it, each a probe of a large table)."""
    hits: list[int] = []
    get = cache.get
    lo, step = start, _FIRST
    while lo < limit:
        hi = min(lo + step, limit)
        found: list[int | None] = list(map(get, hashes[lo:hi]))
        if None in found:
            hits += found[:found.index(None)]  # type: ignore[arg-type]  # none before the first None
            break
        hits += found  # type: ignore[arg-type]  # no None in it
        lo, step = hi, min(2 * step, _SCAN)
    return hits
