"""How many KV-cache tokens a deployment holds, sized the way each engine sizes it.

An engine profiles one forward pass, then gives the KV cache what is left of a share of the
device's memory; the recipes differ in which total they start from and what they charge before
the cache. Each is named (`EngineStack.kv_memory`, or `Deployment.kv_memory` to override it) so
simulated and live runs of that engine fill the same number of blocks.

Sources:
  [SARATHI-MEM] microsoft/sarathi-serve: sarathi/model_executor/model_runner.py
      profile_num_available_blocks: one dummy forward pass, peak = torch.cuda.max_memory_allocated()
      (weights + the pass's activations; the sampler is not run, so no logits), total =
      torch.cuda.get_device_properties().total_memory (sarathi/utils get_gpu_memory), blocks =
      int((total x gpu_memory_utilization - peak) // block bytes), block bytes = block_size x KV
      bytes per token of the worker's layers (sarathi/worker/cache_engine.py); the engine takes the
      smallest worker's count (sarathi/engine/base_llm_engine.py _init_cache). The CUDA context and
      NCCL buffers are not charged: they live in the (1 - utilization) headroom.
  [VIDUR-MEM] microsoft/vidur: vidur/scheduler/utils/memory_planner.py and
      base_replica_scheduler.py: available = total_memory_gb GiB x (1 - memory_margin_fraction),
      minus 2 B x the per-device parameters of the stage's layers (vidur/utils/param_counter.py: no
      embedding, LM head or norms), divided by the KV bytes of one max_tokens request over *all*
      the model's layers, floored to whole requests, times the pipeline stages; blocks = requests x
      (max_tokens // block_size). Defaults: total_memory_gb 80 (A100, H100), margin 0.1,
      max_tokens 4096 (vidur/config). Reproduces Vidur's 53,248 tokens for Llama-2-70B TP2 on A100.
  [SARATHI-2023] Agrawal et al., "SARATHI" (arXiv 2308.16369), Sec. 4 (decode-maximal batching):
      the largest batch is B = floor((M_G - M_S) / (L x m_kv)), GPU memory less the model's
      parameters, over the KV bytes of a sequence of the maximum length: no activations reserved.
      Here M_G is the device total CUDA reports x gpu_memory_utilization (1.0: the paper's rule).
  [VLLM-V1] vLLM V1 as it ships (vllm_releases.py [MEM], v1/worker/gpu_worker.py
      determine_available_memory): total x gpu_memory_utilization - weights - the profile run's
      peak (torch's peak allocation over v1/worker/gpu_model_runner.py profile_run): a forward pass
      of the release's default max_num_batched_tokens, then, while its output is still held, the
      sampler's dummy run over its default max_num_seqs rows ([VLLM-SAMPLER]); the two peaks are
      not simultaneous: the larger is charged. Not charged, for want of a measurement
      (KV is an upper bound by them): the non-torch memory (CUDA context, NCCL and custom
      all-reduce buffers), and in 0.32 the CUDA-graph estimate vLLM measures at start-up (0.36 GiB
      in one published log of a 16-graph piecewise capture, gpustack/runner PR #251; reported to
      overestimate, vllm issue #45178).
  [VLLM-SAMPLER] vLLM 0.32, step by step: profile_run (gpu_model_runner.py l. 6133) keeps the
      forward's `hidden_states` (tokens x hidden) and `last_hidden_states` (rows x hidden) and calls
      _dummy_sampler_run (l. 5927), which draws a random copy of the rows (torch.rand_like), computes
      their logits in the model's dtype (compute_logits: rows x the full vocabulary, all-gathered
      under TP) and runs the sampler twice with temperature 0.5, top-p 0.9 and top-k V - 1; the
      second run (a generator given: TopKTopPSampler.forward_native, v1/sample/ops/
      topk_topp_sampler.py l. 263) is the one whose peak is read here, as its every tensor is: the
      logits' fp32 copy (v1/sample/sampler.py Sampler.forward `logits.to(torch.float32)`; penalties
      off, temperature in place), the top-k/top-p mask in place (apply_top_k_top_p_triton,
      v1/sample/ops/topk_topp_triton.py l. 1613) with its cached buffer of min(SMs, rows) x vocab
      fp32, the softmax's probabilities and the exponential noise of random_sample (fp32, each
      rows x vocab). The first run (FlashInfer's top_k_top_p_sampling_from_logits where installed)
      is taken to peak no higher (its internals are not in the CPU build to read).
  [CUDA-TOTAL] what CUDA reports as an 80 GB card's total (hardware.py GpuSpec.visible_bytes).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from common.errors import HarnessError

from .architectures import ModelArch
from .hardware import GpuSpec

GiB = 1024**3
VIDUR_MAX_TOKENS = 4096  # [VIDUR-MEM] the request generator's max_tokens default
RECIPES = ("sarathi-serve", "vidur", "datasheet", "sarathi-2023", "vllm-v1")


@dataclass(frozen=True)
class MemoryInputs:
    """What a recipe needs of a deployment, per GPU of each pipeline stage."""

    model: ModelArch
    gpu: GpuSpec
    tp: int
    pp: int
    stage_layers: tuple[int, ...]
    stage_weight_bytes: tuple[int, ...]  # every parameter the stage's GPU holds
    activation_bytes: int  # peak activations of the profile pass (no logits)
    logits_bytes: int  # fp32 logits of the sampled rows (the datasheet recipe's reserve)
    kv_bytes_per_element: int = 2  # 16-bit, or 1 for an FP8 cache (precision.py)
    sampler_bytes: int = 0  # [VLLM-SAMPLER] the profile run's peak while sampling (max_num_seqs rows)


def inputs(d, rules=None) -> MemoryInputs:
    """MemoryInputs of a Deployment (deployment.py), its profile pass over `activation_tokens`, or,
    with a release's `rules` (vllm_releases.StepRules), over its default max_num_batched_tokens."""
    if rules is not None:
        d = replace(d, activation_tokens=rules.profile_tokens)
    m, tp = d.model, d.tp
    kvh = m.kv_heads_per_gpu(tp) * m.head_dim
    # Peak activations of the pass on one GPU: the residual stream and hidden state, the QKV output,
    # the MLP's widest intermediate and its activation output (fp16). An MoE layer's fused experts
    # (vLLM fused_moe.py fused_experts_impl) hold top-k rows a token: cache13 (the wider of the
    # gate/up output and the hidden size) and cache2 (the activation output).
    ffn = (m.mlp_in_width + m.intermediate_size) // tp
    if m.is_moe:
        ffn = m.experts_per_token * (max(m.mlp_in_width // tp, m.hidden_size) + m.intermediate_size // tp)
    widths = 2 * m.hidden_size + (m.q_size // tp + 2 * kvh) + ffn
    logits_rows = min(d.activation_tokens, 256)  # vLLM's default max_num_seqs rows of fp32 logits
    return MemoryInputs(
        model=m, gpu=d.gpu, tp=tp, pp=d.pp, stage_layers=tuple(m.layers_per_stage(d.pp)),
        stage_weight_bytes=tuple(m.stage_weight_bytes_per_gpu(tp, d.pp, d.weight_bytes_per_param, d.expert_shards)),
        activation_bytes=d.activation_tokens * widths * m.bytes_per_param,
        logits_bytes=logits_rows * math.ceil(m.vocab_size / tp) * 4, kv_bytes_per_element=d.kv_bytes_per_element,
        sampler_bytes=sampler_peak_bytes(m, d.gpu.sm_count, rules.profile_tokens, rules.profile_seqs) if rules else 0)


def sampler_peak_bytes(m: ModelArch, sms: int, tokens: int, rows: int) -> int:
    """[VLLM-SAMPLER] what vLLM 0.32's profile run holds at its sampler's peak: the forward's
    output over `tokens`, the `rows` sampled hidden states and their random copy, and over the full
    vocabulary the logits in the model's dtype, their fp32 copy, the softmax's probabilities and
    the exponential noise (fp32), and the Triton top-k/top-p buffer of min(SMs, rows) rows."""
    act, v = m.bytes_per_param, m.vocab_size
    buffer_rows = min(1 << (min(sms, rows) - 1).bit_length(), sms)  # min(next_power_of_2(programs), SMs)
    return ((tokens + 2 * rows) * m.hidden_size * act + rows * v * (act + 4 + 4 + 4) + buffer_rows * v * 4)


def check_recipe(name: str) -> str:
    key = str(name).strip().lower().replace("_", "-")
    if key not in RECIPES:
        raise HarnessError(f"unknown KV memory recipe {name!r}; known: {', '.join(RECIPES)}")
    return key


def kv_capacity_tokens(recipe: str, m: MemoryInputs, gpu_memory_utilization: float, block_size: int) -> int:
    """KV tokens the deployment holds under `recipe` (whole blocks except for `datasheet`)."""
    if not 0 < gpu_memory_utilization <= 1:
        raise HarnessError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    if block_size < 1:
        raise HarnessError(f"block_size must be >= 1, got {block_size}")
    kv_head_bytes = 2 * m.model.kv_heads_per_gpu(m.tp) * m.model.head_dim * m.kv_bytes_per_element
    recipe = check_recipe(recipe)
    if recipe == "vidur":
        return _vidur(m, gpu_memory_utilization, block_size, kv_head_bytes)
    if recipe == "sarathi-serve":  # [SARATHI-MEM]
        budget = m.gpu.visible_bytes * gpu_memory_utilization - m.activation_bytes
        blocks = [math.floor((budget - w) / (layers * kv_head_bytes * block_size))
                  for w, layers in zip(m.stage_weight_bytes, m.stage_layers)]
        return max(0, min(blocks)) * block_size
    if recipe == "vllm-v1":  # [VLLM-V1]
        budget = m.gpu.visible_bytes * gpu_memory_utilization - max(m.activation_bytes, m.sampler_bytes)
        blocks = [math.floor((budget - w) / (layers * kv_head_bytes * block_size))
                  for w, layers in zip(m.stage_weight_bytes, m.stage_layers)]
        # The scheduler has one block fewer than the pool (and the "GPU KV cache size" vLLM logs): its
        # BlockPool keeps the first as the null block (v1/core/block_pool.py BlockPool.__init__, 0.32 l. 187).
        return max(0, min(blocks) - 1) * block_size
    if recipe == "sarathi-2023":  # [SARATHI-2023]: tokens, the batch size B is tokens // L
        budget = m.gpu.visible_bytes * gpu_memory_utilization
        return max(0, min(math.floor((budget - w) / (layers * kv_head_bytes))
                          for w, layers in zip(m.stage_weight_bytes, m.stage_layers)))
    # datasheet: the model before engine recipes (HBM x utilization, activations and logits reserved)
    budget = m.gpu.hbm_bytes * gpu_memory_utilization - m.activation_bytes - m.logits_bytes
    tokens = [math.floor((budget - w) / (layers * kv_head_bytes)) for w, layers in zip(m.stage_weight_bytes, m.stage_layers)]
    return max(0, min(tokens))


def _vidur(m: MemoryInputs, util: float, block_size: int, kv_head_bytes: int) -> int:
    """[VIDUR-MEM], with `util` in place of 1 - memory_margin_fraction."""
    model = m.model
    kvh = model.kv_heads_per_gpu(m.tp) * model.head_dim
    q = model.q_size // m.tp
    layer_params = model.hidden_size * (q + 2 * kvh) + q * model.hidden_size + model.mlp_params_per_layer() // m.tp
    available = math.ceil(m.gpu.hbm_bytes / GiB) * GiB * util  # total_memory_gb, whole GiB
    request_bytes = kv_head_bytes * VIDUR_MAX_TOKENS * model.num_layers  # all layers, even with PP
    requests = min(math.floor((available - layers * layer_params * model.bytes_per_param) / request_bytes)
                   for layers in m.stage_layers)
    return max(0, requests) * m.pp * (VIDUR_MAX_TOKENS // block_size) * block_size
