"""Orca's iteration-level scheduling: running decodes plus whole new prompts in one batch.

KV is reserved for the maximum sequence length at admission (as in the Sarathi-Serve artifact's
Orca baseline), so running requests never need preemption, and the batch size is small.
"""
from __future__ import annotations

from engines.core import Batch, Engine, Sequence


class OrcaPolicy:
    reserves_kv = True

    def __init__(self, max_num_seqs: int) -> None:
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
