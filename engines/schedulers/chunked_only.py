"""The chunked-prefills-only ablation: prompts split into chunks, but never mixed with decodes.

Turns alternate (as the Sarathi-Serve artifact's simple-chunking scheduler does): a prefill turn
fills the token budget with chunks of ongoing prefills, then of new requests FCFS; the next turn
is a decode-only batch of every running decode. A turn with nothing to do passes to the other.
"""
from __future__ import annotations

from engines.core import BasePolicy, Batch, Engine, Sequence
from engines.schedulers.decodes import schedule_decodes
from engines.schedulers.registry import register_policy, require_positive


@register_policy("chunked_only")
class ChunkedOnlyPolicy(BasePolicy):
    """Ablation: chunked prefills without hybrid batching (prefill-chunk and decode turns alternate)."""


    def __init__(self, token_budget: int = 512, max_num_seqs: int = 128) -> None:
        require_positive(token_budget=token_budget, max_num_seqs=max_num_seqs)
        self.token_budget = token_budget
        self.max_num_seqs = max_num_seqs
        self.max_batch_tokens = token_budget
        self._prefill_turn = True

    def _prefill_batch(self, engine: Engine) -> list[tuple[Sequence, int]]:
        items: list[tuple[Sequence, int]] = []
        used = 0
        for seq in engine.running:
            if seq.in_flight or not seq.is_prefill:
                continue
            chunk = min(seq.remaining_prefill, self.token_budget - used)
            if chunk == 0:
                return items
            items.append((seq, chunk))
            used += chunk
        while engine.waiting and used < self.token_budget:
            seq = engine.waiting[0]
            if len(engine.running) >= self.max_num_seqs or not engine.blocks.can_admit(seq):
                break
            engine.admit_next()
            chunk = min(seq.remaining_prefill, self.token_budget - used)
            items.append((seq, chunk))
            used += chunk
        return items

    def decode_batch_repeats(self, engine: Engine) -> bool:
        """A decode turn repeats only if the prefill turn between would find nothing to do."""
        if any(s.is_prefill and not s.in_flight for s in engine.running):
            return False
        if not engine.waiting:
            return True
        return len(engine.running) >= self.max_num_seqs or not engine.blocks.can_admit(engine.waiting[0])

    def schedule(self, engine: Engine) -> Batch | None:
        if self._prefill_turn:
            items = self._prefill_batch(engine)
            if items:
                self._prefill_turn = False
                return Batch.build(items)
        decodes, _ = schedule_decodes(engine)
        self._prefill_turn = True
        if decodes:
            return Batch.decodes(tuple(decodes))
        items = self._prefill_batch(engine)
        if items:
            self._prefill_turn = False
        return Batch.build(items) if items else None
