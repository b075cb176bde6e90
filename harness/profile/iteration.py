"""Whole-iteration timings through the executor's public API (the same path a server takes):
synthetic sequences whose context is "already cached" (the cache holds zeros; attention costs the
same), one execute() per timed run."""
from __future__ import annotations

from collections.abc import Callable

from engines.core import Batch, BlockManager, Sequence
from engines.executors.base import SamplingParams


class IterationBench:
    def __init__(self, executor) -> None:
        self.executor = executor
        self.blocks = BlockManager(executor.num_blocks, executor.block_size)
        self._next_id = 1 << 40  # far from any real request id
        self._registered: list[int] = []

    def _seq(self, context_len: int, new_tokens: int) -> Sequence:
        seq = Sequence(self._next_id, context_len + new_tokens, 2)
        self._next_id += 1
        self.blocks.grow(seq, context_len + new_tokens)
        seq.num_computed = context_len
        return seq

    def fits(self, items: list[tuple[int, int]]) -> bool:
        need = sum(-(-(c + n) // self.executor.block_size) for c, n in items)
        return need <= self.executor.num_blocks

    def batch(self, items: list[tuple[int, int]]) -> Callable[[], object]:
        """A timed step of (context_len, new_tokens) items; each run registers, executes, frees.
        Blocks are handed out afresh for every batch shape."""
        self.release()
        self.blocks = BlockManager(self.executor.num_blocks, self.executor.block_size)
        seqs = [self._seq(c, n) for c, n in items]
        new = [n for _, n in items]
        ex = self.executor
        vocab = ex.config.vocab_size
        for s in seqs:  # registered once: only the step itself is timed
            ex.add_request(s.seq_id, [3 + (i % (vocab - 3)) for i in range(s.prompt_len)], SamplingParams())
        batch = Batch.build(list(zip(seqs, new)))
        self._registered.extend(s.seq_id for s in seqs)

        def run():
            ex.execute(batch)
            for s in seqs:  # forget the sampled token so the next run samples again
                ex.tokens(s.seq_id).pop()
        return run

    def release(self) -> None:
        for sid in self._registered:
            self.executor.free(sid)
        self._registered.clear()
