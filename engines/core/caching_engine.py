"""The engine with automatic prefix caching: the step loop of `Engine`, over a
`PrefixCachingBlockManager`, registering each iteration's newly full blocks as it completes.

A separate class so that the engine without a prefix cache runs exactly the code it ran before
(the simulator's hot path pays nothing for a cache it does not have).
"""
from __future__ import annotations

from engines.core.batch import Batch
from engines.core.engine import Engine, Policy, StepOutput
from engines.core.prefix_cache import PrefixCachingBlockManager
from engines.core.sequence import Sequence


class PrefixCachingEngine(Engine):
    blocks: PrefixCachingBlockManager

    def __init__(self, policy: Policy, blocks: PrefixCachingBlockManager, max_model_len: int) -> None:
        if not isinstance(blocks, PrefixCachingBlockManager):
            raise TypeError("PrefixCachingEngine needs a PrefixCachingBlockManager")
        super().__init__(policy, blocks, max_model_len)

    def complete(self, batch: Batch) -> StepOutput:
        out = super().complete(batch)  # finished ones registered as they were freed
        self._register(batch.seqs)
        return out

    def complete_decode_run(self, batch: Batch, k: int) -> tuple[Sequence, ...]:
        # Every sequence's slots are taken before any of them leaves, as k stepped iterations take
        # them (each schedule() allocates before the iteration's finishes free). Otherwise a
        # sequence could reuse a block the finisher just freed where stepping evicted a cached one.
        grow = self.blocks.grow
        for seq in batch.seqs:
            grow(seq, seq.num_computed + k)
        finished = super().complete_decode_run(batch, k)  # its own grows now find nothing to take
        self._register(batch.seqs)
        return finished

    def _register(self, seqs: tuple[Sequence, ...]) -> None:
        register = self.blocks.register
        for seq in seqs:
            if seq.block_table:  # still running (finished and aborted ones hold no blocks)
                register(seq)
