"""Scheduler settings shared by every policy; each policy reads the fields it needs."""
from __future__ import annotations

from dataclasses import dataclass

POLICIES = ("sarathi", "vllm", "orca", "fastertransformer", "hybrid_only", "chunked_only",
            # the first Sarathi paper (arXiv 2308.16369): decode-maximal batching, Orca's best and worst cases
            "decode_maximal", "orca_best", "orca_worst")


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    policy: str
    max_num_seqs: int = 128
    # Sarathi and chunked-only: tokens per iteration, decode tokens included.
    token_budget: int = 512
    # vLLM baseline: tokens of whole prompts in one prefill batch; None = max_model_len.
    max_num_batched_tokens: int | None = None
    # decode_maximal: prefill tokens of the one chunk an iteration (C; decodes ride on top of it).
    chunk_size: int = 256
    # decode_maximal: cut the chunk so chunk + decodes fills whole GEMM tiles of this many tokens
    # (the paper's 256 - (B - 1) with 128); 0 = no cut.
    tile_tokens: int = 0
    # Automatic prefix caching (engines/core/prefix_cache.py): off, as in the paper's engines.
    prefix_caching: bool = False

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"unknown scheduler policy {self.policy!r}; known: {', '.join(POLICIES)}")
        if self.max_num_seqs < 1:
            raise ValueError(f"max_num_seqs must be >= 1, got {self.max_num_seqs}")
        if self.token_budget < 1:
            raise ValueError(f"token_budget must be >= 1, got {self.token_budget}")
        if self.chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {self.chunk_size}")
        if self.tile_tokens < 0:
            raise ValueError(f"tile_tokens must be >= 0 (0: no tile alignment), got {self.tile_tokens}")
        if not isinstance(self.prefix_caching, bool):
            raise ValueError(f"prefix_caching must be true or false, got {self.prefix_caching!r}")
        if self.max_num_batched_tokens is not None and self.max_num_batched_tokens < 1:
            raise ValueError(f"max_num_batched_tokens must be >= 1, got {self.max_num_batched_tokens}")
