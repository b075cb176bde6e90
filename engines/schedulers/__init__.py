"""Scheduling policies, one module each, and the factory that builds an engine around one."""
from __future__ import annotations

from engines.core import (
    DEFAULT_BLOCK_SIZE,
    BlockManager,
    Engine,
    Policy,
    PrefixCachingBlockManager,
    PrefixCachingEngine,
    blocks_for,
)
from engines.schedulers.chunked_only import ChunkedOnlyPolicy
from engines.schedulers.config import POLICIES, SchedulerConfig
from engines.schedulers.decode_maximal import DecodeMaximalPolicy, OrcaWorstPolicy
from engines.schedulers.decode_only import DecodeOnlyPolicy
from engines.schedulers.fastertransformer import FasterTransformerPolicy
from engines.schedulers.orca import OrcaPolicy
from engines.schedulers.sarathi import SarathiPolicy
from engines.schedulers.vllm import VllmPolicy


def make_policy(cfg: SchedulerConfig, max_model_len: int) -> Policy:
    match cfg.policy:
        case "sarathi":
            return SarathiPolicy(cfg.token_budget, cfg.max_num_seqs)
        case "hybrid_only":
            return SarathiPolicy(cfg.token_budget, cfg.max_num_seqs, chunked_prefill=False)
        case "chunked_only":
            return ChunkedOnlyPolicy(cfg.token_budget, cfg.max_num_seqs)
        case "vllm":
            limit = cfg.max_num_batched_tokens or max_model_len
            if limit < max_model_len:
                raise ValueError(
                    f"vllm policy: max_num_batched_tokens {limit} < max_model_len {max_model_len} "
                    "would leave long prompts waiting forever"
                )
            return VllmPolicy(cfg.max_num_seqs, limit)
        case "orca":
            return OrcaPolicy(cfg.max_num_seqs)
        case "fastertransformer":
            return FasterTransformerPolicy(cfg.max_num_seqs)
        case "decode_maximal":
            return DecodeMaximalPolicy(cfg.max_num_seqs, cfg.chunk_size, cfg.tile_tokens)
        case "orca_best":
            return DecodeMaximalPolicy(cfg.max_num_seqs, chunk_size=None)
        case "orca_worst":
            return OrcaWorstPolicy(cfg.max_num_seqs)
    raise ValueError(f"unknown scheduler policy {cfg.policy!r}; known: {', '.join(POLICIES)}")


ROLES = ("both", "prefill", "decode")  # what an engine instance runs (disaggregated clusters split them)


def make_engine(
    cfg: SchedulerConfig,
    kv_capacity_tokens: int,
    max_model_len: int,
    block_size: int = DEFAULT_BLOCK_SIZE,
    role: str = "both",
) -> Engine:
    """An engine with `cfg`'s policy over a KV cache of `kv_capacity_tokens` tokens. A prefill
    instance runs `cfg`'s policy on prompts alone (its requests end at their first token); a
    decode instance runs `DecodeOnlyPolicy` with `cfg`'s max_num_seqs and token budget."""
    if role not in ROLES:
        raise ValueError(f"unknown engine role {role!r}; known: {', '.join(ROLES)}")
    policy = DecodeOnlyPolicy(cfg.max_num_seqs, cfg.token_budget) if role == "decode" else make_policy(cfg, max_model_len)
    num_blocks = kv_capacity_tokens // block_size
    reserve = max_model_len if policy.reserves_kv else None
    if num_blocks < blocks_for(max_model_len, block_size):
        raise ValueError(
            f"KV cache of {kv_capacity_tokens} tokens cannot hold one sequence of max_model_len {max_model_len}"
        )
    check_kv = getattr(policy, "check_kv", None)  # a policy whose batch size is bounded by memory refuses a B that is not
    if check_kv is not None:
        check_kv(num_blocks, blocks_for(max_model_len, block_size))
    if cfg.prefix_caching:
        return PrefixCachingEngine(policy, PrefixCachingBlockManager(num_blocks, block_size, reserve_tokens=reserve),
                                   max_model_len)
    return Engine(policy, BlockManager(num_blocks, block_size, reserve_tokens=reserve), max_model_len)


__all__ = ["POLICIES", "ROLES", "DecodeOnlyPolicy", "SchedulerConfig", "make_engine", "make_policy"]
