"""vLLM as it ships: the defaults of two releases that change what an engine computes, read from
their source and cited by version, file and function. The stacks `vllm-0.19` and `vllm-0.32`
(kernels.py STACKS) price with them; `scheduler=vllm_v1` (engines/schedulers/vllm_v1.py) runs the
V1 scheduler they both use.

Sources (file paths inside the `vllm` package of the release's wheel; 0.32.0 is the project's CPU
build, 0.19.0 the wheel from PyPI, both read whole):

  [ARGS]    engine/arg_utils.py EngineArgs.get_batch_defaults (0.19.0 l. 2024, 0.32.0 l. 2894) and
            _set_default_max_num_seqs_and_batched_tokens_args (0.19.0 l. 2180, 0.32.0 l. 3097):
            max_num_batched_tokens / max_num_seqs by device memory, device name and entry point
            (UsageContext.OPENAI_API_SERVER = `vllm serve`, LLM_CLASS = the offline `LLM`):
              0.32: >= 160 GiB: 16384 / 16384 tokens, 1024 seqs (B200/B300);
                    >= 70 GiB and not an A100: 8192 serve / 16384 LLM, 1024 seqs (H100, H200);
                    else: 2048 serve / 8192 LLM, 256 seqs (A100, and every GPU under 70 GiB).
              0.19: no 160 GiB tier (a B200 takes the H100 values), the rest as 0.32.
  [SCHED]   config/scheduler.py SchedulerConfig: enable_chunked_prefill = True (0.19 l. 83, 0.32
            l. 134); long_prefill_token_threshold = 0 (0.19 l. 79, 0.32 l. 79); 0.32 adds "the
            cap is not applied when the request is the only one in the batch".
  [V1]      v1/core/sched/scheduler.py Scheduler.schedule (0.19 l. 348, 0.32 l. 591): the policy
            (engines/schedulers/vllm_v1.py says what it does and where the harness differs).
  [ASYNC]   config/vllm.py VllmConfig.__post_init__ (0.19 l. 755-788, 0.32 l. 1585-1644):
            async_scheduling None -> True unless speculative decoding of another kind or an
            executor without it; 0.32 also turns it off for pipeline parallelism (V1 runner).
            0.19 v1/executor/multiproc_executor.py max_concurrent_batches (l. 469): with PP the
            batch queue holds pp batches, not the extra one async needs: off with PP in both.
            v1/engine/core.py EngineCore.step_with_batch_queue (0.32 l. 698): batch N+1 is
            scheduled and handed to the executor (non_block) before N's output is awaited, and
            update_from_output(N) runs while N+1 is on the GPU: the engine core's CPU work of a
            step overlaps the GPU work of the one before it.
  [GRAPHS]  config/vllm.py VllmConfig._set_cudagraph_sizes (0.19 l. 1343, 0.32 l. 2292): capture
            sizes [1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16) (+ max_num_seqs and
            max_num_batched_tokens when within max: 0.32 only), max = min(2 x max_num_seqs, ceiling,
            max_num_batched_tokens); ceiling 512, in 0.32 1024 on data-centre Blackwell (sm100).
            v1/cudagraph_dispatcher.py (0.32) dispatch / _compute_bs_to_padded_graph_size: a
            batch of at most max tokens runs the graph of the next capture size, padded to it
            (full graphs for uniform decodes, piecewise otherwise: cudagraph_mode
            FULL_AND_PIECEWISE, config/vllm.py optimization-level defaults, 0.19 l. 215, 0.32 l. 303).
  [ATTN]    platforms/cuda.py _get_backend_priorities (0.19 l. 100-110, 0.32 l. 158-177): the
            first backend that supports the layer: FLASHINFER first on sm100 (compute capability
            10.x), FLASH_ATTN first elsewhere (it supports >= 8.0, v1/attention/backends/flash_attn.py
            supports_compute_capability, 0.32 l. 453: sm120 too); v1/attention/backends/fa_utils.py
            get_flash_attn_version (0.19 l. 75-83, 0.32 l. 99-107): FA3 on sm90 (Hopper), FA4 on
            sm100, FA2 otherwise (Ampere, Ada, sm120).
  [MEM]     v1/worker/gpu_worker.py Worker.determine_available_memory (0.32 l. 634-743): KV bytes =
            total x gpu_memory_utilization - (weights + non-torch memory + the profile run's peak
            activations) - the CUDA-graph memory estimate; the profile run
            (gpu_model_runner.profile_run) is a forward pass of max_num_batched_tokens tokens plus
            the sampler over max_num_seqs rows. The graph estimate is charged when
            VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS is set: default False in 0.19 (envs.py l. 250),
            True in 0.32 (envs.py l. 328; "default since v0.21.0", gpu_worker.py l. 774).
  [UTIL]    config/cache.py CacheConfig.gpu_memory_utilization: 0.9 in 0.19 (l. 41), 0.92 in 0.32
            (l. 102). The harness passes --gpu-memory-utilization explicitly (backend setting).
"""
from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

from common.errors import HarnessError

GIB = 1024**3
ENTRY_POINTS = ("serve", "llm")  # UsageContext.OPENAI_API_SERVER, UsageContext.LLM_CLASS


@dataclass(frozen=True)
class BatchTier:
    """One row of [ARGS]: GPUs with at least `min_gib` of memory (A100s excluded where marked)."""

    min_gib: int
    excludes_a100: bool
    serve_tokens: int
    llm_tokens: int
    max_num_seqs: int


@dataclass(frozen=True)
class VllmRelease:
    version: str
    batch_tiers: tuple[BatchTier, ...]  # first match wins, as get_batch_defaults' if/elif does
    graph_ceiling: int  # [GRAPHS] the largest default capture size
    graph_ceiling_sm100: int
    graph_captures_limits: bool  # [GRAPHS] max_num_seqs and max_num_batched_tokens captured when within
    graph_memory_charged: bool  # [MEM] the CUDA-graph estimate taken from the KV cache
    long_prefill_when_alone: bool  # [SCHED] the long-prefill cap applies to a request alone
    gpu_memory_utilization: float  # [UTIL]


_LOW = BatchTier(0, False, 2048, 8192, 256)
_HOPPER_CLASS = BatchTier(70, True, 8192, 16384, 1024)
RELEASES = {
    "0.19": VllmRelease("0.19.0", (_HOPPER_CLASS, _LOW), graph_ceiling=512, graph_ceiling_sm100=512,
                        graph_captures_limits=False, graph_memory_charged=False, long_prefill_when_alone=True, gpu_memory_utilization=0.9),
    "0.32": VllmRelease("0.32.0", (BatchTier(160, False, 16384, 16384, 1024), _HOPPER_CLASS, _LOW),
                        graph_ceiling=512, graph_ceiling_sm100=1024, graph_captures_limits=True, graph_memory_charged=True,
                        long_prefill_when_alone=False, gpu_memory_utilization=0.92),
}

# Compute capability of the catalog's GPUs by name prefix (hardware.py names; the GPU spec does not
# carry it). NVIDIA CUDA GPUs list (developer.nvidia.com/cuda-gpus): A100 8.0; A40, RTX A6000, A10
# 8.6; L40S, L4, RTX 4090, RTX 6000 Ada 8.9; H100, H200, H20 9.0; B200, B300 10.0; RTX PRO 6000
# Blackwell, RTX 5090 12.0. A name not listed is taken as Ampere (8.x: FA2, the default path).
_ARCH_PREFIXES = (("a100", 80), ("a40", 86), ("rtx-a6000", 86), ("a10", 86), ("l40", 89), ("l4", 89),
                  ("rtx-4090", 89), ("rtx-6000-ada", 89), ("h100", 90), ("h200", 90), ("h20", 90),
                  ("b200", 100), ("b300", 100), ("gb200", 100), ("rtx-pro-6000", 120), ("rtx-5090", 120))


def get_release(name: str) -> VllmRelease:
    key = str(name).strip().lower().removeprefix("vllm-").removeprefix("v")
    key = ".".join(key.split(".")[:2])
    if key not in RELEASES:
        raise HarnessError(f"unknown vLLM release {name!r}; known: {', '.join(sorted(RELEASES))}")
    return RELEASES[key]


def compute_capability(gpu_name: str) -> int:
    """10 x major + minor of a catalog GPU (80 for a name not known, the FA2 path)."""
    name = gpu_name.lower()
    return next((cc for prefix, cc in _ARCH_PREFIXES if name.startswith(prefix)), 80)


def batch_defaults(release: VllmRelease, gpu_name: str, visible_bytes: int, entry: str = "serve",
                   world_size: int = 1) -> tuple[int, int]:
    """[ARGS] (max_num_batched_tokens, max_num_seqs) a release picks when neither flag is given.
    `visible_bytes`: what CUDA reports (current_platform.get_device_total_memory). The CUDA
    defaults do not depend on world_size (only the CPU platform's do)."""
    if entry not in ENTRY_POINTS:
        raise HarnessError(f"unknown vLLM entry point {entry!r}; known: {', '.join(ENTRY_POINTS)}")
    del world_size
    a100 = "a100" in gpu_name.lower()
    tier = next(t for t in release.batch_tiers
                if visible_bytes >= t.min_gib * GIB and not (t.excludes_a100 and a100))
    return (tier.serve_tokens if entry == "serve" else tier.llm_tokens), tier.max_num_seqs


def capture_sizes(release: VllmRelease, gpu_name: str, max_num_seqs: int, max_num_batched_tokens: int) -> tuple[int, ...]:
    """[GRAPHS] the CUDA-graph capture sizes (tokens) of a release without speculative decoding."""
    ceiling = release.graph_ceiling_sm100 if compute_capability(gpu_name) // 10 == 10 else release.graph_ceiling
    top = min(max_num_seqs * 2, ceiling, max_num_batched_tokens)
    sizes = {s for s in (1, 2, 4) if s <= top} | set(range(8, min(top + 1, 256), 8))
    sizes |= set(range(256, top + 1, 16)) if top >= 256 else set()
    if release.graph_captures_limits:
        sizes |= {n for n in (max_num_batched_tokens, max_num_seqs) if n <= top}
    return tuple(sorted(sizes))


def padded(sizes: tuple[int, ...], tokens: int) -> int:
    """[GRAPHS] the tokens a batch of `tokens` runs as: the next capture size, or itself above them."""
    if tokens <= 0 or not sizes or tokens > sizes[-1]:
        return tokens
    return sizes[bisect_left(sizes, tokens)]


def attention_backend(gpu_name: str) -> str:
    """[ATTN] the backend and version both releases pick for a standard decoder's attention."""
    major = compute_capability(gpu_name) // 10
    if major == 10:
        return "flashinfer"
    return "fa3" if major == 9 else "fa2"


def async_scheduling(pp: int) -> bool:
    """[ASYNC] on by default in both releases, off with pipeline parallelism."""
    return pp == 1


def padded_array(sizes: tuple[int, ...], tokens):
    """`padded` over an array of token counts (floats holding whole numbers; the same values)."""
    import numpy as np

    tokens = np.asarray(tokens, dtype=np.float64)
    if not sizes:
        return tokens
    table = np.asarray(sizes, dtype=np.float64)
    at = np.minimum(np.searchsorted(table, tokens, side="left"), len(table) - 1)
    return np.where((tokens > 0) & (tokens <= table[-1]), table[at], tokens)


@dataclass(frozen=True)
class StepRules:
    """What a release stack changes in one deployment's iteration (analytical.py applies them)."""

    graph_sizes: tuple[int, ...]  # capture sizes a batch is padded to (empty: no padding)
    overlap_cpu: bool  # async scheduling: the step costs max(GPU, CPU), not their sum
    profile_tokens: int  # the profile run's tokens (the release's default max_num_batched_tokens)
    profile_seqs: int  # the sampler rows of the profile run (its default max_num_seqs)


def step_rules(release_name: str | None, gpu_name: str, visible_bytes: int, pp: int, graphs: bool) -> StepRules | None:
    """The release's rules on one GPU under its default flags (`vllm serve`), or None for a stack
    that is not a shipped release. The capture sizes follow from the default max_num_seqs and
    max_num_batched_tokens (a scheduler that sets others is not seen by the performance model)."""
    if release_name is None:
        return None
    release = get_release(release_name)
    tokens, seqs = batch_defaults(release, gpu_name, visible_bytes)
    sizes = capture_sizes(release, gpu_name, seqs, tokens) if graphs else ()
    return StepRules(sizes, async_scheduling(pp), tokens, seqs)
