"""Orca's iteration-level scheduling: running decodes plus whole new prompts in one batch.

KV is reserved for the maximum sequence length at admission (as in the Sarathi-Serve artifact's
Orca baseline), so running requests never need preemption, and the batch size is small.
"""
from __future__ import annotations

from engines.core import BasePolicy, Batch, Engine, Sequence
from engines.schedulers.registry import register_policy, require_positive
from engines.schedulers.sweep import Axis, Sweep


@register_policy("orca", plan=Sweep(Axis("max_num_seqs", (8, 16, 32), "s", "batch {}")))
class OrcaPolicy(BasePolicy):
    """Orca: iteration-level hybrid batches with whole prompts, KV reserved for max_model_len."""

    reserves_kv = True
    max_batch_tokens = None  # whole prompts: no limit below max_num_seqs x max_model_len

    def __init__(self, max_num_seqs: int = 128) -> None:
        require_positive(max_num_seqs=max_num_seqs)
        self.max_num_seqs = max_num_seqs

    def schedule(self, engine: Engine) -> Batch | None:
        decodes = [s for s in engine.running if not s.in_flight]  # KV reserved: every running one decodes
        admitted: list[Sequence] = []
        while engine.waiting:
            seq = engine.waiting[0]
            if len(engine.running) >= self.max_num_seqs or not engine.blocks.can_admit(seq):
                break
            engine.admit_next()
            admitted.append(seq)
        if not decodes and not admitted:
            return None
        return Batch.mixed(decodes, admitted, [s.remaining_prefill for s in admitted])
