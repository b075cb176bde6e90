"""The prefix cache's books checked for balance (a test's check, not the hot path's): every block
free, evictable or used, exactly once; reference counts equal to the tables and parked groups that
hold each block; the hash table and the blocks' hashes in agreement (engines/core/prefix_cache.py)."""
from __future__ import annotations


def audit_books(cache, tables: list[list[int]]) -> None:
    """Raise if `cache`'s (a PrefixCachingBlockManager's) books do not balance, given every live
    sequence's block table."""
    counts = [0] * cache.num_blocks
    for table in tables:
        for b in table:
            counts[b] += 1
    held = counts[:]  # and a parked group holds a reference to each of its blocks (parked_turns.py)
    for b, _ in cache.parked.order():
        held[b] += 1
    free, evictable = set(cache._free), set(cache._evictable)
    order = cache.evictable_order()
    if len(free) != len(cache._free) or free & evictable or len(set(order)) != len(order) or len(order) != cache.num_evictable:
        raise AssertionError("a block is free twice, or both free and evictable, or counted wrong")
    evictable = set(order)
    for b in range(cache.num_blocks):
        if held[b] != cache._ref[b]:
            raise AssertionError(f"block {b}: {counts[b]} tables and {held[b] - counts[b]} groups hold it, "
                                 f"reference count {cache._ref[b]}")
        where = (b in free) + (b in evictable) + (counts[b] > 0)
        if where != 1:
            raise AssertionError(f"block {b} is in {where} of free / evictable / used")
        if (b in evictable) != (cache._hash[b] is not None and counts[b] == 0):
            raise AssertionError(f"block {b}: evictable iff cached and unused")
        if b in free and cache._hash[b] is not None:
            raise AssertionError(f"block {b} is free but still cached")
    if any(cache._hash[b] != h for h, b in cache._cache.items()):
        raise AssertionError("the hash table and the blocks' hashes disagree")
