"""Sarathi-Serve's stall-free batching, and its hybrid-batching-only ablation.

Each iteration: (1) every running decode gets one token; (2) ongoing prefills continue with
chunks; (3) new requests are admitted FCFS, each chunk min(remaining prompt, budget - tokens
already in the batch). The token budget counts decode tokens too, and decodes are never held back.
With `chunked_prefill=False` (hybrid batching only) prompts are never split: a prompt joins the
batch whole if it fits the remaining budget, or alone as the batch's only prefill.
"""
from __future__ import annotations

from engines.core import BasePolicy, Batch, Engine
from engines.schedulers.registry import register_policy, require_positive
from engines.schedulers.stall_free import stall_free_batch
from engines.schedulers.sweep import Axis, Sweep

# The planner's grid: the paper's budgets, at its batch of 128 (named in the answer only when not 128).
PLAN = Sweep(Axis("token_budget", (256, 512, 1024, 2048, 4096), "b", "budget {}"),
             Axis("max_num_seqs", (128,), "s", "batch {}", always=False), prefill="budget {} chunks")


@register_policy("hybrid_only", chunked_prefill=False, vllm="whole_prompts")
@register_policy("sarathi", chunked_prefill=True, vllm="chunked_prefill", plan=PLAN)
class SarathiPolicy(BasePolicy):
    """Sarathi-Serve: stall-free batching with chunked prefills under a token budget (hybrid_only:
    whole prompts mixed with decodes, never chunked)."""


    def __init__(self, token_budget: int = 512, max_num_seqs: int = 128, chunked_prefill: bool = True) -> None:
        require_positive(token_budget=token_budget, max_num_seqs=max_num_seqs)
        self.token_budget = token_budget
        self.max_num_seqs = max_num_seqs
        self.chunked_prefill = chunked_prefill
        # Most tokens one iteration holds; without chunking a whole prompt may pass the budget.
        self.max_batch_tokens = token_budget if chunked_prefill else None

    def chunk_batch_repeats(self, engine: Engine, batch: Batch) -> bool:
        """Chunked, with this class's own schedule (a subclass scheduling its own way says for
        itself), a batch of decodes then one chunk, the budget full: the next schedule() walks the
        same decodes (none finished, each given a slot: Engine.chunk_run_limit), gives the same
        prompt, the first running prefill, min(what is left, budget - decodes) tokens, the same
        chunk while more than that is left, and admits nothing (no room left for a chunk)."""
        is_prefill = batch.is_prefill
        return (self.chunked_prefill and type(self).schedule is SarathiPolicy.schedule and is_prefill[-1]
                and is_prefill.count(True) == 1 and sum(batch.new_tokens) == self.token_budget)

    def schedule(self, engine: Engine) -> Batch | None:
        # the body is compiled (stall_free.py): called once a simulated iteration
        return stall_free_batch(engine, self.token_budget, self.max_num_seqs, self.chunked_prefill)
