"""vLLM's prefill-prioritizing scheduler (the paper's vLLM baseline, before chunked prefills).

If waiting requests fit (whole prompts within max_num_batched_tokens, running sequences within
max_num_seqs, KV blocks free), run a prefill-only batch of them; otherwise a decode-only batch of
every running sequence, preempting by recompute when blocks run out. Prefill and decode never mix.
"""
from __future__ import annotations

from engines.core import Batch, Engine, Sequence
from engines.schedulers.decodes import schedule_decodes


class VllmPolicy:
    reserves_kv = False

    def __init__(self, max_num_seqs: int, max_num_batched_tokens: int) -> None:
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens

    def schedule(self, engine: Engine) -> Batch | None:
        items: list[tuple[Sequence, int]] = []
        used = 0
        while engine.waiting:
            seq = engine.waiting[0]
            # can_admit first: with a prefix cache it finds the cached part, which the prefill skips
            if len(engine.running) >= self.max_num_seqs or not engine.blocks.can_admit(seq):
                break
            n = seq.remaining_prefill
            if used + n > self.max_num_batched_tokens:
                break
            engine.admit_next()
            items.append((seq, n))
            used += n
        if items:
            return Batch.build(items)
        decodes, _ = schedule_decodes(engine)
        return Batch.decodes(tuple(decodes)) if decodes else None
