"""The engine with automatic prefix caching: the step loop of `Engine`, over a
`PrefixCachingBlockManager`, registering each iteration's newly full blocks as it completes.

A separate class so that the engine without a prefix cache runs exactly the code it ran before
(the simulator's hot path pays nothing for a cache it does not have).
"""
from __future__ import annotations

from itertools import compress

from engines.compiled import mypyc_attr
from engines.core.batch import Batch
from engines.core.engine import Engine, Policy, StepOutput
from engines.core.prefix_cache import PrefixCachingBlockManager
from engines.core.sequence import Sequence


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)  # (engines/compiled.py)
class PrefixCachingEngine(Engine):
    """Blocks are registered when a prefill chunk completes them (or, by a policy that says so,
    when it schedules the chunk: vllm_v1, as vLLM V1 caches them) and when a sequence frees its
    blocks (it finished, was preempted or aborted). Blocks a decode fills are registered at that
    free, not as they fill: only a request that carries the sequence's own generated tokens could
    find them, and a client has those once the answer is done (a conversation's next turn). This
    keeps the cost per decode iteration at the plain engine's."""

    def __init__(self, policy: Policy, blocks: PrefixCachingBlockManager, max_model_len: int,
                 policy_name: str | None = None) -> None:
        if not isinstance(blocks, PrefixCachingBlockManager):
            raise TypeError("PrefixCachingEngine needs a PrefixCachingBlockManager")
        super().__init__(policy, blocks, max_model_len, policy_name)
        self.cache = blocks

    def complete(self, batch: Batch) -> StepOutput:
        out = super().complete(batch)  # finished ones registered as they were freed
        register = self.cache.register
        for seq in compress(batch.seqs, batch.is_prefill):
            if seq.block_table:  # still running (finished and aborted ones hold no blocks)
                register(seq)
        return out

    def complete_decode_run(self, batch: Batch, k: int) -> tuple[Sequence, ...]:
        # Every sequence's slots are taken before any of them leaves, as k stepped iterations take
        # them (each schedule() allocates before the iteration's finishes free). Otherwise a
        # sequence could reuse a block the finisher just freed where stepping evicted a cached one.
        self.cache.grow_run(batch.seqs, k)
        return self._decode_run_done(batch, k, None)  # grown: the plain engine's grows would find nothing to take
