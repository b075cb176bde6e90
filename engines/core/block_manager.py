"""Paged KV cache bookkeeping: fixed-size blocks, a free list, one block table per sequence.

Two modes. Paged (vLLM, Sarathi): admission allocates the blocks of the prompt being prefilled and
decodes grow the table one block at a time. Reservation (Orca, FasterTransformer): admission
allocates blocks for `reserve_tokens` (the maximum sequence length), so a running sequence never
needs another block and is never preempted.
"""
from __future__ import annotations

from collections.abc import Sequence as Sequence_
from typing import Any

from engines.compiled import mypyc_attr
from engines.core.sequence import Sequence

DEFAULT_BLOCK_SIZE = 16  # tokens per block, vLLM's default


def blocks_for(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size)


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)  # (engines/compiled.py)
class BlockManager:
    def __init__(
        self,
        num_blocks: int,
        block_size: int = DEFAULT_BLOCK_SIZE,
        watermark: float = 0.01,
        reserve_tokens: int | None = None,
    ) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"need num_blocks >= 1 and block_size >= 1, got {num_blocks}, {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.reserve_tokens = reserve_tokens
        # vLLM keeps ~1% of blocks free at admission so running decodes rarely need preemption;
        # reservation mode needs none (the Sarathi-Serve artifact sets 0 for Orca).
        self.watermark_blocks = 0 if reserve_tokens is not None else int(watermark * num_blocks)
        self._free: list[int] = list(range(num_blocks - 1, -1, -1))

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self._free)

    def admission_blocks(self, seq: Sequence) -> int:
        tokens = self.reserve_tokens if self.reserve_tokens is not None else seq.prefill_target
        return blocks_for(max(tokens, seq.prefill_target), self.block_size) - len(seq.block_table)

    def can_admit(self, seq: Sequence) -> bool:
        return self.num_free - self.admission_blocks(seq) >= self.watermark_blocks

    def admit(self, seq: Sequence, num_tokens: int | None = None) -> None:
        """Allocate the blocks of the prompt being prefilled, or (`num_tokens`) only those of its
        first `num_tokens` tokens: vLLM V1 allocates a chunk's blocks when it schedules the chunk."""
        self._take(seq, self.admission_blocks(seq) if num_tokens is None else self.blocks_to_grow(seq, num_tokens))

    def decode_headroom(self, seq: Sequence) -> int:
        """Decode tokens `seq` can still add before it needs a new block: its k-th next decode
        (k = 1, 2, ...) takes one iff k > headroom and (k - 1 - headroom) is a multiple of the block
        size. The one statement of "the blocks a decode needs" (schedulers, decode runs, the
        simulator's replay)."""
        return len(seq.block_table) * self.block_size - seq.num_computed

    def decode_blocks_needed(self, headrooms: Sequence_[int], k: int) -> int:
        """Blocks that `k` more decode tokens of each sequence need, given their `decode_headroom`s."""
        bs = self.block_size
        return sum(-(-(k - h) // bs) for h in headrooms if k > h)

    def blocks_to_grow(self, seq: Sequence, num_tokens: int) -> int:
        """Blocks `seq` still needs so that its table covers `num_tokens` tokens."""
        return max(0, blocks_for(num_tokens, self.block_size) - len(seq.block_table))

    def can_grow(self, seq: Sequence, num_tokens: int) -> bool:
        return self.blocks_to_grow(seq, num_tokens) <= self.num_free

    def grow(self, seq: Sequence, num_tokens: int) -> None:
        need = -(-num_tokens // self.block_size) - len(seq.block_table)  # blocks_to_grow, inlined: a hot path
        if need > 0:
            self._take(seq, need)

    def free(self, seq: Sequence) -> None:
        self._free.extend(reversed(seq.block_table))
        seq.block_table = []

    def _take(self, seq: Sequence, n: int) -> None:
        if n > len(self._free):
            raise RuntimeError(f"KV over-commit: {seq} needs {n} blocks, {len(self._free)} free")
        if n == 1:  # (the id moved as its object: typed int, the compiled build would free it and box it anew)
            free: list[Any] = self._free
            seq.block_table.append(free.pop())
        elif n > 0:
            seq.block_table.extend(self._free[-n:][::-1])
            del self._free[-n:]

    # -- a check for tests and soaks ------------------------------------------------------------
    def audit(self, tables: list[list[int]]) -> None:
        """Raise AssertionError if the books do not balance, given every live sequence's block
        table: each block free exactly once or held by exactly one table."""
        held = [b for table in tables for b in table]
        free = set(self._free)
        if len(free) != len(self._free):
            raise AssertionError("a block is on the free list twice")
        if len(set(held)) != len(held):
            raise AssertionError("a block is held by two tables (this manager shares none)")
        if free & set(held) or len(free) + len(held) != self.num_blocks:
            raise AssertionError(f"{len(free)} free + {len(held)} held blocks, of {self.num_blocks}, overlapping or not all")
