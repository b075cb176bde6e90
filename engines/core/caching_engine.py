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
        finished = super().complete_decode_run(batch, k)
        self._register(batch.seqs)
        return finished

    def _register(self, seqs: tuple[Sequence, ...]) -> None:
        register = self.blocks.register
        for seq in seqs:
            if seq.block_table:  # still running (finished and aborted ones hold no blocks)
                register(seq)
