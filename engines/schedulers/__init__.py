"""Scheduling policies, one module each, registered by name (`registry`: a decorator on the class,
or the `sarathi_harness.policies` entry points of another package), and the factory that builds an
engine around one from its `EngineConfig` (engines/core/config.py)."""
from __future__ import annotations

from engines.core import (
    ROLES,
    BlockManager,
    Engine,
    EngineConfig,
    HostTier,
    Policy,
    PrefixCachingBlockManager,
    PrefixCachingEngine,
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


def make_engine(config: EngineConfig) -> Engine:
    """An engine as `config` says: its scheduler's policy over a KV cache of
    `config.kv_capacity_tokens` tokens. A prefill instance runs the policy on prompts alone (its
    requests end at their first token); a decode instance runs `DecodeOnlyPolicy` with the
    scheduler's max_num_seqs and token budget. ValueError names a knob value the policy refuses, or
    a KV cache its batch cannot live in (the policy's `check_kv`)."""
    cfg, max_model_len = config.scheduler, config.max_model_len
    decode = config.role == "decode"
    policy = _decode_policy(cfg) if decode else make_policy(cfg, max_model_len)
    name = f"{cfg.policy} (decode instance)" if decode else cfg.policy
    reserve = max_model_len if policy.reserves_kv else None
    policy.check_kv(config.num_blocks, config.blocks_per_seq)  # a batch bounded by memory refuses a B that is not
    if config.prefix_caching:
        tier = HostTier(config.host_kv_blocks) if config.host_kv_blocks else None
        blocks = PrefixCachingBlockManager(config.num_blocks, config.block_size, reserve_tokens=reserve, tier=tier)
        return PrefixCachingEngine(policy, blocks, max_model_len, name)
    return Engine(policy, BlockManager(config.num_blocks, config.block_size, reserve_tokens=reserve), max_model_len, name)


def _decode_policy(cfg: SchedulerConfig) -> DecodeOnlyPolicy:
    """A decode instance takes the knobs it shares with `cfg`'s policy; the rest keep its defaults."""
    return DecodeOnlyPolicy(**{k: v for k, v in cfg.knobs if k in DecodeOnlyPolicy.KNOBS})


__all__ = ["ROLES", "Axis", "Sweep", "DecodeOnlyPolicy", "EngineConfig", "PolicySpec", "SchedulerConfig", "make_engine", "make_policy", "policy_names",
           "policy_spec", "register_policy"]
