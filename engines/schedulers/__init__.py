"""Scheduling policies, one module each, registered by name (`registry`: a decorator on the class,
or the `sarathi_harness.policies` entry points of another package), and the factory that builds an
engine around one."""
from __future__ import annotations

from engines.core import (
    DEFAULT_BLOCK_SIZE,
    BlockManager,
    Engine,
    HostTier,
    Policy,
    PrefixCachingBlockManager,
    PrefixCachingEngine,
    blocks_for,
)

# The built-in policies register themselves on import (their modules' decorators), in this order.
from engines.schedulers import sarathi  # noqa: F401  (sarathi, hybrid_only)
from engines.schedulers import vllm  # noqa: F401
from engines.schedulers import orca  # noqa: F401
from engines.schedulers import fastertransformer  # noqa: F401
from engines.schedulers import chunked_only  # noqa: F401
from engines.schedulers import decode_maximal  # noqa: F401  (decode_maximal, orca_best, orca_worst)
from engines.schedulers import vllm_v1  # noqa: F401  (vLLM V1's scheduler as it ships)
from engines.schedulers.config import SchedulerConfig
from engines.schedulers.decode_only import DecodeOnlyPolicy
from engines.schedulers.registry import PolicySpec, policy_names, policy_spec, register_policy
from engines.schedulers.sweep import Axis, Sweep


def make_policy(cfg: SchedulerConfig, max_model_len: int) -> Policy:
    """`cfg`'s policy object (ValueError names a bad knob value)."""
    return policy_spec(cfg.policy).build(dict(cfg.knobs), max_model_len)


ROLES = ("both", "prefill", "decode")  # what an engine instance runs (disaggregated clusters split them)


def make_engine(
    cfg: SchedulerConfig,
    kv_capacity_tokens: int,
    max_model_len: int,
    block_size: int = DEFAULT_BLOCK_SIZE,
    role: str = "both",
    host_kv_blocks: int = 0,
) -> Engine:
    """An engine with `cfg`'s policy over a KV cache of `kv_capacity_tokens` tokens. A prefill
    instance runs `cfg`'s policy on prompts alone (its requests end at their first token); a
    decode instance runs `DecodeOnlyPolicy` with `cfg`'s max_num_seqs and token budget.
    `host_kv_blocks` > 0 puts a host-memory tier of that many blocks under the prefix cache
    (engines/core/kv_tier.py; it needs prefix caching)."""
    if role not in ROLES:
        raise ValueError(f"unknown engine role {role!r}; known: {', '.join(ROLES)}")
    policy = _decode_policy(cfg) if role == "decode" else make_policy(cfg, max_model_len)
    name = f"{cfg.policy} (decode instance)" if role == "decode" else cfg.policy
    num_blocks = kv_capacity_tokens // block_size
    reserve = max_model_len if policy.reserves_kv else None
    if num_blocks < blocks_for(max_model_len, block_size):
        raise ValueError(
            f"KV cache of {kv_capacity_tokens} tokens cannot hold one sequence of max_model_len {max_model_len}"
        )
    policy.check_kv(num_blocks, blocks_for(max_model_len, block_size))  # a batch bounded by memory refuses a B that is not
    if host_kv_blocks and not cfg.prefix_caching:
        raise ValueError("a host KV tier holds evicted prefix-cache blocks: it needs prefix caching on")
    if cfg.prefix_caching:
        tier = HostTier(host_kv_blocks) if host_kv_blocks else None
        return PrefixCachingEngine(policy, PrefixCachingBlockManager(num_blocks, block_size, reserve_tokens=reserve,
                                                                     tier=tier), max_model_len, name)
    return Engine(policy, BlockManager(num_blocks, block_size, reserve_tokens=reserve), max_model_len, name)


def _decode_policy(cfg: SchedulerConfig) -> DecodeOnlyPolicy:
    """A decode instance takes the knobs it shares with `cfg`'s policy; the rest keep its defaults."""
    return DecodeOnlyPolicy(**{k: v for k, v in cfg.knobs if k in DecodeOnlyPolicy.KNOBS})


__all__ = ["ROLES", "Axis", "Sweep", "DecodeOnlyPolicy", "PolicySpec", "SchedulerConfig", "make_engine", "make_policy", "policy_names",
           "policy_spec", "register_policy"]
