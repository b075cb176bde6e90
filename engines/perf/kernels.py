"""Kernel choices: how close one engine's kernels get to the hardware, operator by operator.

A GPU's datasheet says what the hardware can do (hardware.py); what an engine reaches depends on
its kernels. An `EngineStack` names the GEMM, attention and elementwise kernels an engine runs
(`perf.stack=`; `perf.attention_kernel=` swaps the attention kernel alone); its constants are
measured on isolated operators, never fitted to serving or capacity results.

Sources:
  [VIDUR-OPS] Vidur's public operator profiles (microsoft/vidur, data/profiling/compute/
              {a100,a40}/meta-llama/*/mlp.csv at commit 7d47513, and a100 Llama-2-70B
              attention.csv at commit e2d00e9, 2024-05-08): per-kernel GPU times of the
              Sarathi-Serve-era engine's operators on the paper's A100 80GB PCIe and A40 servers.
              Constants below are least-squares fits of relative error on a training split, scored
              on a held-out one (`python benchmarks/fit_operators.py` prints both):
              A100 trained on Llama-2-7B/70B, scored on Llama-3-8B/70B; A40 trained on TP1/2,
              scored on TP4/8; attention trained on even-indexed shapes, scored on odd ones.
  [SARATHI]  microsoft/sarathi-serve: sarathi/model_executor/models/llama.py (residual add, then
             RMSNorm: separate kernels), layers/layernorm.py, rotary_embedding.py, activation.py
             (vLLM's custom CUDA ops); attention/flash_attention_wrapper.py (vllm_flash_attn
             flash_attn_with_kvcache: one call per prefill sequence, one batched decode call);
             model_runner.py (eager PyTorch, no CUDA graphs).
  [VLLM-3662] vLLM PR #3662 (2024-03): "fused_add_rms_norm is memory latency bound under many
             scenarios" (one CTA per token, scalar loads), fixed with vector loads; #27931
             (2025-11) vectorized rms_norm: why the early-2024 kernels reach 0.4-0.5 of HBM.
  [FA2]      hardware.py: FlashAttention-2 paper efficiencies (GpuSpec.attention_efficiency).
  [SARATHI23-OPS] Agrawal et al., "SARATHI" (arXiv 2308.16369 v1, 2023), the section on
             decode-maximal batching: its table of three batches of LLaMA-13B on one RTX A6000
             (nanoGPT + xFormers, fp16), attention column: a 1,024-token prefill 10.0 ms, a decode-only batch of 4 at
             1,024 tokens 5.68 ms, a 1,021-token chunk with 3 such decodes 15.2 ms (40 layers).
  [FA3]      Shah et al., "FlashAttention-3" (arXiv 2407.08608, 2024): FP16 forward on H100 SXM
             "up to 740 TFLOPs/s (75% utilization)", i.e. 0.75 of the 989 TFLOP/s peak.
  [VLLM-V1]  vLLM V1 alpha blog (blog.vllm.ai, 2025-01-27, "vLLM V1: A Major Upgrade..."):
             "the kernels used for V0 and V1 are almost identical, the performance difference is
             mainly due to ... reduced CPU overheads"; FlashAttention 3 integrated; torch.compile
             with piecewise CUDA graphs. vLLM docs, design/cuda_graphs.md (PR #24374, Sep 2025)
             and vllm/config/compilation.py: cudagraph_mode FULL_AND_PIECEWISE (full graphs for
             uniform decode batches, piecewise graphs, attention left out, for the rest), captured
             up to max_cudagraph_capture_size = 512 tokens by default.
  [FA2-VARLEN] How vLLM's attention backends run a step that holds prefill chunks and decodes:
             * FLASH_ATTN: vllm/v1/attention/backends/flash_attn.py (vLLM 0.32.0), FlashAttentionImpl.
               forward: one flash_attn_varlen_func call over the step's tokens, max_seqlen_q = the
               step's max_query_len; its FlashAttentionMetadataBuilder comment: FA2 has "special
               max_query_len=1 packed-GQA handling" that mixed prefill-decode steps do not get.
             * FA2 there is vllm-project/flash-attention, csrc/flash_attn/flash_api.cpp (commit
               617264c1c7955c9e84817654ebeedff069f3c5f1), mha_varlen_fwd: seqlenq_ngroups_swapped
               (query groups packed into rows) only when max_seqlen_q == 1, and "Only apply split-k
               for decoding" under the same condition; with paged KV, run_mha_fwd(params, stream,
               paged_KV) forces the split kernel with num_splits <= 1, whose
               src/flash_fwd_launch_template.h run_mha_fwd_splitkv_dispatch has kBlockM = 64 and a
               grid of ceil(max_seqlen_q / 64) x batch x q_heads CTAs. src/flash_fwd_kernel.h
               compute_attn_1rowblock_splitkv returns only for row blocks past the sequence's queries
               (m_block * kBlockM >= actual_seqlen_q) and runs a block's MMAs on all 64 rows: a
               decode in a mixed step is a 64-row query tile per query head over all its keys.
             * FA3 (sm90): hopper/flash_api.cpp get_pack_gqa packs query groups for paged KV without
               TMA in every step, mixed or not, and get_pagedkv_tma is false for vLLM's 16-token
               pages (page_size % kBlockN != 0), so a decode's tile is the same in both: no rule.
             * FLASHINFER: vllm/v1/attention/backends/flashinfer.py orders decodes first
               (split_decodes_and_prefills) and runs them in BatchDecodeWithPagedKVCacheWrapper, the
               prefills in BatchPrefillWithPagedKVCacheWrapper: a decode's kernel is the same: no rule.
  [AIC-DECODE] NVIDIA AIConfigurator's measured operator profiles (ai-dynamo/aiconfigurator, commit
             095f58a51c4ca8e61b66ec108d86f223f8d559ce, aic-core/src/aiconfigurator_core/systems/data/
             {l40s,rtx_pro_6000_server}/attention/vllm/0.24.0/generation_attention_perf.parquet):
             vLLM 0.24's FlashAttention-2 decode (kernel_source vllm_flash_attn_fa2) on an NVIDIA L40S
             (AD102) and an RTX PRO 6000 Blackwell Server Edition (GB202), batch 1-2,048 x context
             2-131,072, 1-96 query and 1-8 KV heads, head dim 128, bf16 KV, no window. Fitted by
             `python benchmarks/fit_decode_ad102_gb202.py AIC_REPO` (least squares of relative error on even
             points, scored on odd; points whose KV fits in L2, 96 / 128 MB, left out unless
             under 1/16 of it: the profiler re-reads a warm cache, a serving step does not):
             t = t0 + per CTA x sequences x KV heads + KV bytes / (eta x bandwidth).
  [AIC-GEMM] The same repository and commit, .../{l40s/gemm/vllm/0.22.0, rtx_pro_6000_server/gemm/sglang/
             0.5.10}/gemm_perf.parquet: bf16 GEMMs (torch's, i.e. cuBLAS, as vLLM 0.22 and SGLang 0.5.10
             call them) at M = 1-32,768 x N, K = 32-65,536 on the same two GPUs; the decode shapes'
             weight-streaming fraction by the same script.
Launch costs and CUDA graphs: launch.py; CPU costs: cpu_costs.py.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from common.errors import HarnessError

from .attention_kernels import (FA2_DECODE_MEASURED, AttentionKernel, fa2_decode_source, get_attention_kernel,
                                known_attention_kernels)
from .cpu_device import CPU_NAMES
from .split_kv import SPLIT_KERNEL_ROWS
from .vllm_releases import RELEASES, attention_backend


@dataclass(frozen=True)
class GemmKernel:
    """A linear layer [M x K] @ [K x N] on one GPU.

    smooth (measured kernels): t = fixed_s + (C^4 + W^4)^(1/4), a soft maximum of
        C = 2 tiled(M) K N / (peak x compute_efficiency x K / (K + k_half))   (compute; short K
            reaches less of the peak: k_half is the K at which it reaches half the asymptote)
        W = bytes (K N + M (K + N)) / (HBM x stream_efficiency)              (weights + activations)
    The soft maximum is the measured knee: near M x K x N balance both costs overlap only partly.
    not smooth (datasheet): t = max(C, W) with k_half = 0 and no fixed cost.
    """

    name: str
    compute_efficiency: float  # of peak FLOP/s, asymptotically in K
    k_half: float
    stream_efficiency: float  # of HBM bandwidth while streaming weights
    fixed_s: float
    smooth: bool


@dataclass(frozen=True)
class StreamKernel:
    """A bandwidth-bound kernel: fixed_s + bytes / (efficiency x HBM bandwidth) per launch."""

    fixed_s: float
    efficiency: float  # achievable fraction of the GPU's HBM bandwidth

    def per_byte(self, hbm_bandwidth: float) -> float:
        return 1.0 / (self.efficiency * hbm_bandwidth)


@dataclass(frozen=True)
class ElementwiseKernels:
    """The norm, residual add, rotary, activation, KV-cache write and embedding kernels of a layer."""

    name: str
    fused_add_norm: bool  # one kernel reads x and the residual and writes both (4h), or RMSNorm (2h) + add (3h)
    norm: StreamKernel
    add: StreamKernel
    rope: StreamKernel
    act: StreamKernel
    kv_write: StreamKernel
    embedding: StreamKernel


# ----------------------------------------------------------------------------- GEMM kernels
# cuBLAS as the paper-era engine calls it (fp16, torch.nn.functional.linear), fits of [VIDUR-OPS]
# mlp.csv: A100 80GB PCIe train 6.7 % / held-out 5.9 % MAPE; A40 6.4 % / 9.1 %.
_GEMM_2024 = {
    "a100-80g-pcie": GemmKernel("cublas-2024", compute_efficiency=0.737, k_half=22.0, stream_efficiency=0.884,
                                fixed_s=5.7e-6, smooth=True),
    "a40-48g": GemmKernel("cublas-2024", compute_efficiency=0.776, k_half=76.0, stream_efficiency=0.793,
                          fixed_s=9.1e-6, smooth=True),
}
# A GPU without a profile: the A100 PCIe fit with its compute efficiency scaled by the GPU's large-GEMM
# figure over the A100 PCIe's ([MAMF] in hardware.py: 0.737 of peak where the best measured kernel
# reaches 0.811, i.e. the engine's shapes get 0.909 of the best), the same weight-streaming fraction
# and fixed cost. An assumption, named here: no profile of those GPUs is in [VIDUR-OPS].
_GEMM_2024_FALLBACK = "a100-80g-pcie"
_GEMM_FALLBACK_MAMF = 0.811  # hardware.py: a100-80g-pcie matmul_efficiency
# Where a GPU's decode GEMMs were measured, its own weight-streaming fraction replaces the A100's 0.884
# [AIC-GEMM]: the median over bf16 GEMMs of M <= 16 whose weights are over 4 x L2 of bytes / ((t - 5.7 us)
# x bandwidth): L40S 0.819, RTX PRO 6000 Server 0.939 (decode-GEMM MAPE with the A100 fit's other constants
# 8.4 -> 4.6 % and 8.3 -> 2.5 %). A part of the same chip takes its sibling's (kernels of the chip, memory of
# its own datasheet): the RTX 4090 the L40S's, the Workstation Edition the Server's.
_GEMM_STREAM_MEASURED = {"l40s-48g": 0.819, "rtx-pro-6000-server-96g": 0.939}
_GEMM_STREAM_SIBLING = {"rtx-4090-24g": "l40s-48g", "rtx-pro-6000-ws-96g": "rtx-pro-6000-server-96g"}
_GEMM_IDEAL = GemmKernel("datasheet", compute_efficiency=0.0, k_half=0.0, stream_efficiency=0.0, fixed_s=0.0,
                         smooth=False)  # 0.0: the GPU's matmul_efficiency / weight_stream_efficiency

# ----------------------------------------------------------------------------- elementwise kernels
# The model before issue 14: fused add + norm, every kernel at the streaming fraction, no launch cost.
_IDEAL_STREAM = StreamKernel(0.0, 0.85)  # hardware.py _HBM_EFF
_IDEAL = ElementwiseKernels("ideal", fused_add_norm=True, norm=_IDEAL_STREAM, add=_IDEAL_STREAM,
                            rope=_IDEAL_STREAM, act=_IDEAL_STREAM, kv_write=_IDEAL_STREAM,
                            embedding=_IDEAL_STREAM)

# vLLM's early-2024 custom CUDA kernels as Sarathi-Serve runs them ([SARATHI]: unfused add), fits of
# [VIDUR-OPS] mlp.csv per GPU (fixed us, fraction of HBM). The add's fit exceeds 1.0 on A100 (its
# input is still in L2 after the down projection): capped at 1.0. The KV-cache write
# (reshape_and_cache) has no profile column: priced like the rotary kernel, the other scatter of K.
_VLLM_2024 = {
    "a100-80g-pcie": ElementwiseKernels(
        "vllm-2024", fused_add_norm=False,
        norm=StreamKernel(2.7e-6, 0.43), add=StreamKernel(1.3e-6, 1.0), rope=StreamKernel(2.4e-6, 0.51),
        act=StreamKernel(2.2e-6, 0.52), kv_write=StreamKernel(2.4e-6, 0.51), embedding=StreamKernel(2.9e-6, 0.17)),
    "a40-48g": ElementwiseKernels(
        "vllm-2024", fused_add_norm=False,
        norm=StreamKernel(2.2e-6, 0.60), add=StreamKernel(0.3e-6, 0.94), rope=StreamKernel(0.8e-6, 0.84),
        act=StreamKernel(1.9e-6, 0.79), kv_write=StreamKernel(0.8e-6, 0.84), embedding=StreamKernel(2.1e-6, 0.50)),
}
# A GPU built on a profiled GPU's chip takes that chip's measured fractions (of its own peak and
# bandwidth): the RTX A6000 is the A40's GA102 (hardware.py [A6000-DS], [GA102-WP]) at higher clocks.
_SAME_CHIP = {"rtx-a6000-48g": "a40-48g"}
# GPUs without a profile take the A100 80GB PCIe's kernels (the same code on another part: the
# fractions are a property of the latency-bound kernels [VLLM-3662] as much as of the memory).
_VLLM_2024_FALLBACK = "a100-80g-pcie"


@dataclass(frozen=True)
class EngineStack:
    """An engine's kernel choices, resolved for one GPU by `kernels_for`, its CPU costs and how it
    launches kernels (launch.py)."""

    name: str
    gemm: str  # "datasheet" or "cublas-2024"
    attention: str
    elementwise: str  # "ideal" or "vllm-2024"
    kv_memory: str  # how the engine sizes its KV cache (memory.py RECIPES)
    description: str
    cpu: str = "vidur-2024"  # per-iteration / per-sequence CPU costs (cpu_costs.py CPU_PROFILES)
    graphs: str = "eager"  # launch.py GRAPH_MODES
    launch_s: float = 0.0  # exposed CPU cost of one eager kernel launch (launch.py)
    graph_max_tokens: int = 0  # largest captured batch (tokens; = sequences for a decode batch)
    attention_hopper: str | None = None  # the attention kernel on Hopper GPUs, where it differs
    allreduce: str | None = None  # the engine's own all-reduce kernels (links.py ALLREDUCE_KERNELS); None: NCCL's
    # A shipped vLLM release (vllm_releases.py RELEASES): its attention backend per architecture, CUDA-graph
    # capture sizes (batches padded to them), async scheduling (CPU overlapped with the GPU step) and KV sizing.
    release: str | None = None
    # The engine runs a step's prefill chunks and decodes as one varlen attention call (vLLM V1's
    # FLASH_ATTN backend [FA2-VARLEN]); False: separate prefill and decode calls ([SARATHI]).
    varlen_mixed: bool = False


STACKS = {
    # [SARATHI] model_runner.py (commit 13f16cf) calls self.model(...) directly: eager PyTorch, no CUDA
    # graphs. Its launches are not priced (launch_s 0, the zero-effect value): Vidur's operator times
    # are kernel times (vidur/profiling/common/cuda_timer.py: torch profiler CUDA time), its CPU
    # profile has no model-execution column, and an eager engine enqueues ahead of the GPU, so only
    # launches longer than their kernels would show; no measurement of that for this engine exists.
    "sarathi-serve-2024": EngineStack(
        "sarathi-serve-2024", gemm="cublas-2024", attention="sarathi-2024", elementwise="vllm-2024",
        kv_memory="sarathi-serve",
        description="the paper's engine as Vidur profiled it: cuBLAS GEMMs, Sarathi-Serve's FlashAttention "
                    "wrapper, vLLM's early-2024 norm/rotary/activation kernels, unfused residual add, eager PyTorch"),
    # The first Sarathi paper's engine (arXiv 2308.16369 Sec. 5: nanoGPT with xFormers attention,
    # fp16, eager PyTorch). Its attention is the paper's own measurement (`xformers-2023` above,
    # [SARATHI23-OPS]); its GEMMs, norms and CPU costs are the kernels measured for the engine that
    # grew out of it (cuBLAS GEMMs are the same torch.nn.functional.linear calls; nanoGPT's norms stand
    # in as vLLM's kernels), Vidur's CPU profile, and the paper's own memory rule for the batch size
    # (memory.py `sarathi-2023`: B = (M_G - M_S) / (L x m_kv)). What-ifs: the earlier stand-in,
    # Sarathi-Serve's measured wrapper (perf.attention_kernel=sarathi-2024), and it with masked tiles
    # skipped (sarathi-2024-causal).
    "sarathi-2023": EngineStack(
        "sarathi-2023", gemm="cublas-2024", attention="xformers-2023", elementwise="vllm-2024",
        kv_memory="sarathi-2023",
        description="the first Sarathi paper's nanoGPT + xFormers engine: its attention priced from the paper's "
                    "operator table, GEMMs and norms as sarathi-serve-2024's measured kernels, the paper's KV memory rule"),
    "ideal": EngineStack(
        "ideal", gemm="datasheet", attention="fa2-ideal", elementwise="ideal", kv_memory="datasheet",
        description="datasheet fractions: large-GEMM efficiency at every shape, FlashAttention-2 paper "
                    "efficiency, fused add+norm, kernels at 0.85 of HBM, no launch costs (the model before "
                    "measured kernels)"),
    # [VLLM-V1]: V0's cuBLAS GEMMs ("almost identical" kernels); FA3 on Hopper, FA2 elsewhere (V1 picks
    # FLASH_ATTN, vllm_flash_attn's FA3 build on sm90); torch.compile fuses the residual add into the
    # norm (no profile of Inductor's kernels: the `ideal` elementwise entries); full CUDA graphs for
    # decode batches, piecewise for the rest, up to 512 tokens; eager launches at launch.py LAUNCH_S.
    # CPU costs: V1's engine core as its developers measured its step components (cpu_costs.py
    # `vllm-v1`; synchronous scheduling, no overlap with the GPU priced). All-reduce: vLLM's own
    # kernels where they run (links.py ALLREDUCE_KERNELS: H100 NVSwitch, PCIe P2P pairs [VLLM-CAR]),
    # NCCL's pricing elsewhere.
    "vllm-v1-2025": EngineStack(
        "vllm-v1-2025", gemm="cublas-2024", attention="fa2-ideal", attention_hopper="fa3-2024",
        elementwise="ideal", kv_memory="sarathi-serve", cpu="vllm-v1", graphs="full-and-piecewise", launch_s=4e-6,
        graph_max_tokens=512, allreduce="vllm-2025", varlen_mixed=True,
        description="vLLM V1 (2025): cuBLAS GEMMs, FlashAttention-3 on Hopper / FA2 elsewhere, torch.compile-"
                    "fused add+norm, CUDA graphs (full for decodes, piecewise otherwise, up to 512 tokens), "
                    "V1's measured step CPU costs (0.43 ms + 1.1 us a sequence), its custom all-reduce on H100 NVSwitch"),
}
# vLLM as it ships (vllm_releases.py: every default cited by release, file and function): V1's kernels as
# `vllm-v1-2025` prices them (cuBLAS GEMMs, torch.compile-fused add+norm, vLLM's all-reduce, V1's
# measured CPU costs), with the release's attention backend per compute capability (FA2 on sm8x and
# sm120, FA3 on sm90, FlashInfer on sm100), its capture sizes, async scheduling and profile-run KV sizing.
for _version in RELEASES:
    STACKS[f"vllm-{_version}"] = EngineStack(
        f"vllm-{_version}", gemm="cublas-2024", attention="fa2-ideal", elementwise="ideal", kv_memory="vllm-v1",
        cpu="vllm-v1", graphs="full-and-piecewise", launch_s=4e-6, graph_max_tokens=512, allreduce="vllm-2025",
        release=_version, varlen_mixed=True,
        description=f"vLLM {_version} as it ships: V1 scheduler defaults, attention backend by compute capability, "
                    "CUDA graphs padded to its capture sizes, async scheduling hiding the engine core's CPU "
                    "time behind the GPU step (pp = 1), KV sized after a profile run")
# Vidur profiled Sarathi-Serve's vLLM-derived engine (vidur/profiling: "compatibility with sarathi
# cudatimer"; the operator and CPU profiles above): the vLLM Vidur profiled is the paper's engine.
STACK_ALIASES = {"vllm-vidur-2024": "sarathi-serve-2024"}
DEFAULT_STACK = "sarathi-serve-2024"


def known_stacks() -> list[str]:
    return sorted([*STACKS, *STACK_ALIASES])


def get_stack(name: str | EngineStack | None) -> EngineStack:
    if isinstance(name, EngineStack):
        return name
    key = DEFAULT_STACK if name is None else str(name).strip().lower().replace("_", "-")
    key = STACK_ALIASES.get(key, key)
    if key not in STACKS:
        raise HarnessError(f"unknown engine stack {name!r}; known: {', '.join(known_stacks())}")
    return STACKS[key]


_HOPPER = ("h100", "h200")  # hardware.py catalog names of sm90 parts
_RELEASE_ATTENTION = {"fa2": "fa2-ideal", "fa3": "fa3-2024", "flashinfer": "flashinfer-2025"}
# [FA2-VARLEN] a decode's query tile in a mixed varlen call: kBlockM of run_mha_fwd_splitkv_dispatch,
# the split kernel's rows (split_kv.py). Priced for FlashAttention-2 as vLLM's stacks resolve it
# (`fa2-ideal`); the measured `sarathi-2024` kernels model a separate split-KV decode call.
_VARLEN_FA2 = "fa2-ideal"


@dataclass(frozen=True)
class Kernels:
    """One stack's kernels on one GPU (what PerfModel prices with)."""

    gemm: GemmKernel
    attention: AttentionKernel
    elementwise: ElementwiseKernels


def kernels_for(stack: EngineStack, gpu_name: str, gpu_matmul_efficiency: float,
                attention: str | None = None) -> Kernels:
    """The stack's kernels on one GPU; `attention` names another attention kernel than the stack's."""
    hopper = stack.attention_hopper if gpu_name.startswith(_HOPPER) else None
    if stack.release is not None:  # the release's backend on this architecture (vllm_releases.py [ATTN])
        hopper = _RELEASE_ATTENTION[attention_backend(gpu_name)]
    att = get_attention_kernel(attention or hopper or stack.attention)
    if stack.varlen_mixed and att.name == _VARLEN_FA2 and gpu_name not in CPU_NAMES:  # FA2 runs on GPUs only
        att = replace(att, mixed_decode_rows=SPLIT_KERNEL_ROWS)
        measured = None if attention else fa2_decode_source(gpu_name)  # a kernel named by hand stays as named
        if measured is not None:  # vLLM's FA2 decode as measured on this chip [AIC-DECODE]
            fixed, per_cta, eta = FA2_DECODE_MEASURED[measured]
            att = replace(att, name="fa2-vllm-measured", decode_fixed_s=fixed, decode_per_cta_s=per_cta,
                          decode_efficiency=eta)
    chip = _SAME_CHIP.get(gpu_name, gpu_name)
    if stack.gemm == "datasheet":
        gemm = _GEMM_IDEAL
    elif chip in _GEMM_2024:
        gemm = _GEMM_2024[chip]
    else:
        base = _GEMM_2024[_GEMM_2024_FALLBACK]
        gemm = replace(base, compute_efficiency=base.compute_efficiency * gpu_matmul_efficiency / _GEMM_FALLBACK_MAMF)
        stream = _GEMM_STREAM_MEASURED.get(_GEMM_STREAM_SIBLING.get(chip, chip))
        if stream is not None:  # its decode GEMMs as measured on its chip [AIC-GEMM]
            gemm = replace(gemm, stream_efficiency=stream)
    ew = _IDEAL if stack.elementwise == "ideal" else _VLLM_2024.get(chip, _VLLM_2024[_VLLM_2024_FALLBACK])
    return Kernels(gemm, att, ew)
