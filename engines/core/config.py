"""What one engine instance is built with, as one frozen value (`EngineConfig`).

The scheduler's settings (a policy's name and its knobs, engines.schedulers.SchedulerConfig) say
what each iteration computes; the rest belongs to the engine around the policy: its KV cache
(capacity, block size, an automatic prefix cache and a host tier under it), the longest sequence
it admits, and its role in a disaggregated cluster. Every backend (the simulator, the in-repo
server, clusters, prefill/decode instances) builds one per instance and hands it to
`engines.schedulers.make_engine`, so a setting of the engine never rides inside the scheduler's.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from engines.core.block_manager import DEFAULT_BLOCK_SIZE, blocks_for

if TYPE_CHECKING:  # an annotation only: the core builds no policy (engines.schedulers does)
    from engines.schedulers.config import SchedulerConfig

ROLES = ("both", "prefill", "decode")  # what an engine instance runs (disaggregated clusters split them)

# The engine's settings an experiment may also set per scheduler, beside the policy's knobs
# (`scheduler.NAME.prefix_caching: true`, the key users have always written; the Hydra schema of
# every scheduler has it). The engine reads them, never the policy.
PER_SCHEDULER = ("prefix_caching",)


@dataclass(frozen=True)
class EngineConfig:
    """`EngineConfig(SchedulerConfig("sarathi"), kv_capacity_tokens=1 << 20, max_model_len=4096)`;
    ValueError names a setting the engine cannot run with (the policy's knob values are checked
    when make_engine builds it)."""

    scheduler: SchedulerConfig  # the policy and its knobs
    kv_capacity_tokens: int  # the KV cache, in tokens: kv_capacity_tokens // block_size blocks
    max_model_len: int  # the longest sequence (prompt + output) it admits
    block_size: int = DEFAULT_BLOCK_SIZE
    role: str = "both"  # both | prefill (requests end at their first token) | decode (KV arrives from elsewhere)
    # Off as in the papers' engines: automatic prefix caching (engines/core/prefix_cache.py).
    prefix_caching: bool = False
    # A host-memory tier of that many blocks under the prefix cache (engines/core/kv_tier.py); 0: none.
    host_kv_blocks: int = 0

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"unknown engine role {self.role!r}; known: {', '.join(ROLES)}")
        if self.block_size < 1 or self.host_kv_blocks < 0:
            raise ValueError(f"need block_size >= 1 and host_kv_blocks >= 0, got {self.block_size}, {self.host_kv_blocks}")
        if self.num_blocks < self.blocks_per_seq:
            raise ValueError(f"KV cache of {self.kv_capacity_tokens} tokens cannot hold one sequence of "
                             f"max_model_len {self.max_model_len}")
        if self.host_kv_blocks and not self.prefix_caching:
            raise ValueError("a host KV tier holds evicted prefix-cache blocks: it needs prefix caching on")

    @property
    def num_blocks(self) -> int:
        return self.kv_capacity_tokens // self.block_size

    @property
    def blocks_per_seq(self) -> int:
        """The blocks one sequence of max_model_len holds (what a reserving policy takes per request)."""
        return blocks_for(self.max_model_len, self.block_size)


def per_scheduler_defaults() -> dict[str, object]:
    """The defaults of the settings a scheduler's entry may carry (PER_SCHEDULER), by name."""
    return {f.name: f.default for f in fields(EngineConfig) if f.name in PER_SCHEDULER}
