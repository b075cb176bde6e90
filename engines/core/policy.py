"""What the engine and the harness ask of a scheduling policy (`Policy`), and the defaults most
policies share (`BasePolicy`), so no caller probes a policy with getattr.

A policy decides what each iteration computes (`schedule`); the rest describes it to those who
size or check a deployment around it: the engine (KV reservation, `check_kv`, runs of identical
decode iterations), the planner's bounds (batch and token limits), the pipeline replay (micro-batch
cap) and vLLM's exporter (extra flags). The rules a policy keeps are in ARCHITECTURE.md ("Policies").
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from engines.core.batch import Batch
    from engines.core.engine import Engine


class Policy(Protocol):
    reserves_kv: bool  # reservation-mode KV (Orca, FasterTransformer): max_model_len held per request
    max_num_seqs: int  # most sequences running at once
    max_batch_tokens: int | None  # most tokens one iteration holds; None: whole prompts of a full batch
    max_micro_batch_seqs: int | None  # most sequences one pipeline micro-batch holds; None: no cap of its own
    vllm_flags: tuple[str, ...]  # `vllm serve` flags beyond its mode's and limits (engines/external/vllm.py)

    def schedule(self, engine: Engine) -> Batch | None: ...

    def check_kv(self, num_blocks: int, blocks_per_seq: int) -> None:
        """Refuse (ValueError) a KV cache its batch cannot live in; called once, when the engine is built."""

    def decode_batch_repeats(self, engine: Engine) -> bool:
        """Would the decode-only batch it just returned be returned again, with the same sequences,
        while nothing arrives or finishes? (The simulator then fast-forwards the run.)"""

    def chunk_batch_repeats(self, engine: Engine, batch: Batch) -> bool:
        """Is `batch`, which it just returned, its running decodes and then one prompt's chunk that
        fills its budget, one it returns again (the same decodes, the prompt's next chunk of the
        same size, nothing admitted, whatever arrives) while no decode finishes or lacks a KV slot
        and more than a chunk of the prompt is left? (The simulator then fast-forwards the run:
        Engine.chunk_run_limit.)"""


def missing_members(policy: object) -> list[str]:
    """What of `Policy` the object lacks (the registry names it when a policy is built)."""
    members = list(Policy.__annotations__) + [n for n, v in vars(Policy).items() if callable(v) and not n.startswith("_")]
    return [m for m in members if not hasattr(policy, m)]


class BasePolicy:
    """The defaults: paged KV, no token limit beyond its batch's prompts, no micro-batch cap, no
    KV check, no extra vLLM flags, and decode batches that repeat, which holds for FCFS admission
    that stops at the first request that does not fit (a policy admitting in another order says
    otherwise, as shortest_prompt_first and chunked_only do); no chunk runs (chunk_batch_repeats)."""

    reserves_kv = False
    max_batch_tokens: int | None = None
    max_micro_batch_seqs: int | None = None
    vllm_flags: tuple[str, ...] = ()

    def check_kv(self, num_blocks: int, blocks_per_seq: int) -> None:
        return None

    def decode_batch_repeats(self, engine: Engine) -> bool:
        return True

    def chunk_batch_repeats(self, engine: Engine, batch: Batch) -> bool:
        return False  # a policy says so only where it knows (SarathiPolicy)
