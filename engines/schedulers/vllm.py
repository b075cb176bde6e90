"""vLLM's prefill-prioritizing scheduler (the paper's vLLM baseline, before chunked prefills).

If waiting requests fit (whole prompts within max_num_batched_tokens, running sequences within
max_num_seqs, KV blocks free), run a prefill-only batch of them; otherwise a decode-only batch of
every running sequence, preempting by recompute when blocks run out. Prefill and decode never mix.
"""
from __future__ import annotations

from engines.core import BasePolicy, Batch, Engine, Sequence
from engines.schedulers.decodes import schedule_decodes
from engines.schedulers.registry import register_policy, require_positive
from engines.schedulers.sweep import Axis, Sweep


# The planner's grid: max batch sizes; the prompt budget written out as None (max_model_len).
@register_policy("vllm", vllm="whole_prompts", plan=Sweep(Axis("max_num_seqs", (32, 64, 128, 256), "s", "batch {}"),
                                                        fixed={"max_num_batched_tokens": None}, prefill="whole prefills"))
class VllmPolicy(BasePolicy):
    """vLLM baseline: prefill-prioritizing, whole prompts, no mixing; preempts by recompute."""


    def __init__(self, max_num_seqs: int = 128, max_num_batched_tokens: int | None = None, *, max_model_len: int) -> None:
        """max_num_batched_tokens: tokens of whole prompts in one prefill batch (None: max_model_len)."""
        require_positive(max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens)
        limit = max_num_batched_tokens or max_model_len
        if limit < max_model_len:
            raise ValueError(f"vllm policy: max_num_batched_tokens {limit} < max_model_len {max_model_len} "
                             "would leave long prompts waiting forever")
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = limit
        self.max_batch_tokens = limit

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
