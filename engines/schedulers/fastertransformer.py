"""FasterTransformer's request-level batching: a batch runs until all of its requests finish.

When nothing runs, admit up to max_num_seqs waiting requests (KV reserved for the maximum
sequence length) and prefill their whole prompts together; then decode only, never admitting,
until the last of them finishes.
"""
from __future__ import annotations

from engines.core import BasePolicy, Batch, Engine, Sequence
from engines.schedulers.registry import register_policy, require_positive


@register_policy("fastertransformer")
class FasterTransformerPolicy(BasePolicy):
    """FasterTransformer: request-level batching, KV reserved for max_model_len."""

    reserves_kv = True
    max_batch_tokens = None  # whole prompts of a full batch

    def __init__(self, max_num_seqs: int = 128) -> None:
        require_positive(max_num_seqs=max_num_seqs)
        self.max_num_seqs = max_num_seqs

    def schedule(self, engine: Engine) -> Batch | None:
        if engine.running:
            decodes = tuple([s for s in engine.running if not s.in_flight])
            return Batch.decodes(decodes) if decodes else None
        admitted: list[tuple[Sequence, int]] = []
        while engine.waiting and len(engine.running) < self.max_num_seqs:
            seq = engine.waiting[0]
            if not engine.blocks.can_admit(seq):
                break
            engine.admit_next()
            admitted.append((seq, seq.remaining_prefill))
        return Batch.build(admitted) if admitted else None
