"""A decode instance of a disaggregated cluster (Splitwise ISCA'24, DistServe OSDI'24): its requests
arrive with their prompt's KV moved from a prefill instance (`Sequence.arrive_prefilled`), so it
runs decodes only.

Each iteration: (1) every running decode gets one token (`schedule_decodes`, preempting by
recompute when blocks run out); (2) arrivals join FCFS while they fit (max_num_seqs, their KV
blocks plus the next token's, over vLLM's watermark) and decode in the same iteration. A request
preempted here is recomputed here, in chunks under `token_budget` mixed with the decodes, as a
vLLM decode instance recomputes a preempted request locally rather than sending it back.
"""
from __future__ import annotations

from engines.core import BasePolicy, Batch, Engine, Sequence, blocks_for
from engines.schedulers.decodes import schedule_decodes


class DecodeOnlyPolicy(BasePolicy):
    KNOBS = ("max_num_seqs", "token_budget")  # taken from the cluster's scheduler when its policy has them

    def __init__(self, max_num_seqs: int = 128, token_budget: int = 512) -> None:
        self.max_num_seqs = max_num_seqs
        self.token_budget = token_budget

    def _fits(self, engine: Engine, seq: Sequence) -> bool:
        blocks = engine.blocks
        if seq.is_prefill:  # preempted here: recomputed, admitted like any prompt
            return blocks.can_admit(seq)
        need = blocks_for(seq.num_computed + 1, blocks.block_size) - len(seq.block_table)
        return blocks.num_free - need >= blocks.watermark_blocks

    def schedule(self, engine: Engine) -> Batch | None:
        decodes, recomputes = schedule_decodes(engine)
        items: list[tuple[Sequence, int]] = [(s, 1) for s in decodes]
        used = len(decodes)
        for seq in recomputes:
            chunk = min(seq.remaining_prefill, self.token_budget - used)
            if chunk <= 0:
                break
            items.append((seq, chunk))
            used += chunk
        while engine.waiting:
            seq = engine.waiting[0]
            if len(engine.running) >= self.max_num_seqs or not self._fits(engine, seq):
                break
            if seq.is_prefill:
                chunk = min(seq.remaining_prefill, self.token_budget - used)
                if chunk <= 0:
                    break
                engine.admit_next()
                items.append((seq, chunk))
                used += chunk
                continue
            engine.admit_next()
            engine.blocks.grow(seq, seq.num_computed + 1)
            items.append((seq, 1))
            used += 1
        return Batch.build(items) if items else None
