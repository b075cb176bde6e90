"""vLLM's scheduler without a model: built in-process and stepped with a fake model output.

For tests and benchmarks of the plugin (tests/vllm_scheduler_driver.py, benchmarks/
bench_vllm_plugin.py) and for checking a policy's batches inside vLLM's scheduler without a server:
`build_scheduler` makes a scheduler of vLLM's configuration classes with a KV cache of `kv_blocks`
usable blocks (only a model's config.json is read: `write_model_config`), `step_output` the model
runner's answer to a step (one token for every request that completes its prompt or decodes).
Imports vLLM.
"""
from __future__ import annotations

from pathlib import Path


def write_model_config(folder: Path) -> str:
    """A tiny Llama's config.json (as scripts/make_tiny_model.py shapes it; no weights)."""
    from transformers import LlamaConfig

    LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
                vocab_size=2048, max_position_embeddings=1 << 16).save_pretrained(folder)  # any max_model_len a test asks
    return str(folder)


def build_scheduler(cls, model: str, *, kv_blocks: int, block_size: int, max_model_len: int, max_num_seqs: int,
                    max_num_batched_tokens: int, prefix_caching: bool = False, long_prefill_token_threshold: int = 0,
                    async_scheduling: bool = True):
    """`cls` (PolicyScheduler, or vLLM's AsyncScheduler or Scheduler for a baseline) as vLLM's engine
    core builds it; `async_scheduling=False` for the synchronous Scheduler (as vLLM's own scheduler
    tests run it: tests/v1/core/utils.py create_scheduler)."""
    import torch
    from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    blocks = kv_blocks + 1  # vLLM keeps block 0 as its null block
    model_cfg = ModelConfig(model=model, max_model_len=max_model_len, skip_tokenizer_init=True, dtype="float32")
    sched_cfg = SchedulerConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                                max_model_len=max_model_len, enable_chunked_prefill=True, is_encoder_decoder=False,
                                long_prefill_token_threshold=long_prefill_token_threshold,
                                async_scheduling=async_scheduling)
    cache_cfg = CacheConfig(block_size=block_size, cache_dtype="auto", enable_prefix_caching=prefix_caching)
    cache_cfg.num_gpu_blocks = blocks
    config = VllmConfig(scheduler_config=sched_cfg, model_config=model_cfg, cache_config=cache_cfg,
                        device_config=DeviceConfig("cpu"))
    kv = KVCacheConfig(num_blocks=blocks, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(
        ["layer"], FullAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=64, dtype=torch.float32))])
    return cls(vllm_config=config, kv_cache_config=kv, structured_output_manager=StructuredOutputManager(config),
               block_size=block_size, log_stats=False)


def step_output(scheduler, output, token=lambda request_id, index: 7):
    """The fake model's answer to `output` (None when it scheduled nothing): per request that
    completes its prompt or decodes, `token(request_id, index)` as its index-th output token (from
    1); nothing for a prompt chunk that is not the last. Call right after schedule()."""
    from vllm.v1.outputs import ModelRunnerOutput

    ids = list(output.num_scheduled_tokens)
    if not ids:
        return None
    sampled = []
    for rid in ids:
        request = scheduler.requests[rid]
        made = len(request.output_token_ids) + request.num_output_placeholders
        sampled.append([] if request.is_prefill_chunk else [token(rid, made)])
    return ModelRunnerOutput(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)}, sampled_token_ids=sampled)
