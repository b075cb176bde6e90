"""Attention kernels: what one engine's attention reaches, prefill and decode, by name.

`perf.attention_kernel=` picks one of these by name; an `EngineStack` (kernels.py) names its own.
The bracketed source tags ([VIDUR-OPS], [FA2-VARLEN], [AIC-DECODE], ...) are listed, with file and
commit, in kernels.py's docstring.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from common.errors import HarnessError

from .split_kv import SplitKvDecode


@dataclass(frozen=True)
class AttentionKernel:
    """Prefill: a fixed cost per kernel call + FLOPs at a fraction of the GPU's FlashAttention-2
    figure (hardware.py GpuSpec.attention_efficiency), or the KV/Q/O bytes if slower; decode: one
    fixed cost per batch + KV bytes at a fraction of HBM bandwidth."""

    name: str
    prefill_fixed_s: float  # per prefill sequence (each chunk is its own kernel call)
    prefill_fa2_fraction: float  # of the GPU's FA2 attention FLOP/s
    causal_flops: bool  # masked tiles skipped (causal pairs) or paid (the full n x (c + n) rectangle)
    decode_fixed_s: float  # per batch of decodes (one call)
    decode_efficiency: float | None  # of HBM bandwidth; None: the GPU's streaming fraction
    # FlashAttention-2's split-KV decode (split_kv.py): small batches cost their busiest CTAs, not
    # their bytes. None: the decode call is its fixed cost + its KV stream.
    decode_split: SplitKvDecode | None = None
    # A decode that shares one varlen call with a prefill chunk computes this many query rows per
    # query head against its keys (the rows x keys rectangle at the prefill FLOP rate, or its KV
    # stream if slower); 0: it costs what it costs in a decode-only call. [FA2-VARLEN]
    mixed_decode_rows: int = 0
    # Each decode's own cost in a decode call beyond its KV stream: this much per CTA, one per decode
    # sequence and KV head on the GPU (FA2 packs a KV head's query group into one CTA) [AIC-DECODE].
    decode_per_cta_s: float = 0.0


# ----------------------------------------------------------------------------- attention kernels
_ATTENTION = {
    # The FlashAttention-2 paper's figures (hardware.py [FA2]): causal FLOPs, no launch cost. An
    # upper bound on what a 2023-24 kernel reaches; the model before issue 14 priced this.
    "fa2-ideal": AttentionKernel("fa2-ideal", prefill_fixed_s=0.0, prefill_fa2_fraction=1.0, causal_flops=True,
                                 decode_fixed_s=0.0, decode_efficiency=None),
    # Sarathi-Serve's attention wrapper as Vidur profiled it on A100 80GB PCIe (paged KV, block 16),
    # [VIDUR-OPS] attention.csv (Llama-2-70B TP2; fit 9.1 % / held-out 9.2 % prefill, 8.3 / 8.3 %
    # decode): prefill 21.5 us + rectangle FLOPs at 0.374 of peak = 0.62 of the A100's FA2 figure
    # (in-chunk masked tiles cost about as much as unmasked ones: n = 4096, c = 0 takes 2.3 ms);
    # decode: one call, FlashAttention-2's split-KV kernel (split_kv.py [FA2-SPLITKV]) as the
    # profile's small batches show it (b = 1 takes 17-18 us from 160 to 3,648 cached tokens, as the
    # splits grow; b = 4 stays at 27 us from 800 to 3,648): 6.45 us + KV bytes at 0.830 of HBM, or, where
    # too few CTAs run, their blocks of 128 keys at 10.2 GB/s a CTA (random 16-token pages: Vidur's
    # profiler scatters the block table), + 6.70 us for the combine kernel when the call splits. One
    # prefill call per sequence ([SARATHI] flash_attention_wrapper.py). Measured on A100 only: other
    # GPUs take the same fractions and CTA rate, with their own SM counts.
    # FlashAttention-3 on Hopper [FA3]: 0.75 of peak where the GPU's FA2 figure is 0.34 (hardware.py
    # H100/H200); no launch or per-call cost measured (0: the datasheet-style entry). Decode as FA2.
    "fa3-2024": AttentionKernel("fa3-2024", prefill_fixed_s=0.0, prefill_fa2_fraction=0.75 / 0.34, causal_flops=True,
                                decode_fixed_s=0.0, decode_efficiency=None),
    # FlashInfer, vLLM's first choice on sm100 (vllm_releases.py [ATTN]): no operator-level measurement
    # of it is cited here, so it is priced at the FA2 paper's fractions of the GPU's own figures (the
    # `fa2-ideal` entry under its own name): an assumption, named, until a profile of it exists.
    "flashinfer-2025": AttentionKernel("flashinfer-2025", prefill_fixed_s=0.0, prefill_fa2_fraction=1.0,
                                       causal_flops=True, decode_fixed_s=0.0, decode_efficiency=None),
    "sarathi-2024": AttentionKernel("sarathi-2024", prefill_fixed_s=21.5e-6, prefill_fa2_fraction=0.374 / 0.60,
                                    causal_flops=False, decode_fixed_s=6.45e-6, decode_efficiency=0.830,
                                    decode_split=SplitKvDecode(combine_s=6.70e-6, cta_bandwidth=10.2e9)),
}
# The first Sarathi paper's engine, nanoGPT with xFormers' memory-efficient attention, as the paper
# measured it [SARATHI23-OPS]: two of the table's three batches are its inputs, the third is held out
# (harness/analysis/sarathi23: the operator table's claims). The shape law that carries them to other
# shapes is the roofline this module prices every attention kernel with: a prefill chunk's time is its
# causal (query, key) pairs' FLOPs at one rate (masked tiles skipped: the FA2 paper Sec. 3.1.1 skips
# every block above the diagonal, and xFormers' own table in its PR #362, A100, 2022-08, times B 32,
# M 512, K 128 in 133.1 us with LowerTriangularMask against 172.4 us without), or its KV + Q/O bytes
# at the decode rate if slower; a decode reads its KV once, memory-bound. Per layer, 1,024 x 1,025 / 2
# pairs x 4 x 128 x 40 FLOPs in 10.0 ms / 40 = 43.0 TFLOP/s, 0.463 of the A6000's FA2 figure (154.8
# x 0.60); 4 x (1,025 x 20,480 + 20,480) bytes in 5.68 ms / 40 = 592 GB/s, 0.771 of 768 GB/s. No
# per-call cost: three batches cannot separate one from the two rates (0: the zero-effect value). The
# held-out batch comes out at 14.2 ms against 15.2. Other GPUs take the same fractions of their own
# figures, an assumption named here (the paper measured the A6000 only).
_ATTENTION["xformers-2023"] = AttentionKernel("xformers-2023", prefill_fixed_s=0.0, prefill_fa2_fraction=0.4629,
                                              causal_flops=True, decode_fixed_s=0.0, decode_efficiency=0.7707)
# A what-if, no stack's default: the same table with a per-call cost the three batches cannot rule out,
# the 21.5 us a prefill call Vidur measured for the later wrapper (`sarathi-2024` below), the prefill
# rate re-derived so the inputs still hold (10.0 ms / 40 - 21.5 us = 228.5 us for the pairs: 47.0
# TFLOP/s, 0.5064 of the FA2 figure); the held-out batch is priced the same, 14.2 ms. It prices a
# chunked prefill's one call per chunk (the cause the chunk-64 attention note tests).
_ATTENTION["xformers-2023-percall"] = replace(_ATTENTION["xformers-2023"], name="xformers-2023-percall",
                                              prefill_fixed_s=21.5e-6, prefill_fa2_fraction=0.5064)
# A what-if, no stack's default: the decode call's own fixed cost, the one split of the decode input the
# held-out batch can speak to. A hybrid batch runs one prefill and one decode call, as the two input
# batches together do, so a prefill call's fixed cost cancels from the three rows; solved exactly they
# give 0.42 ms of KV a decode (40 layers), 2.0 TB/s for its 21.0 MB a layer: above the A6000's 768 GB/s.
# The nearest split the hardware allows reads the KV at the full 768 GB/s (4 x 21.0 MB in 109.5 us a
# layer) and leaves 142.0 - 109.5 = 32.5 us a layer to the call: the largest decode-call cost the input
# permits. The held-out batch then comes out at 14.5 ms (15.2 published, 14.2 without it); riding
# decodes cost 1.08x their decode-only share, not 1.00x (the table's own: (15.2 - 9.94) / 3 over 5.68 / 4, 1.23x).
_ATTENTION["xformers-2023-decodecall"] = replace(_ATTENTION["xformers-2023"], name="xformers-2023-decodecall",
                                                 decode_fixed_s=32.5e-6, decode_efficiency=1.0)
# A what-if, never a stack's default: `sarathi-2024` with the masked tiles skipped, the one thing that
# differs, to switch off the cause the first Sarathi paper's chunk-size claims name (the stand-in pays an
# unchunked prefill's whole query x key rectangle). Causal kernels of the paper's time skip masked work:
# the FA2 paper (Sec. 3.1.1) skips every block above the diagonal, and xFormers' A100 table in its PR
# #362 (2022-08) times the FlashAttention path at B 32, M 512, K 128 in 133.1 us with LowerTriangularMask
# against 172.4 us without. No measurement of the 2023 kernel's fraction exists (docs/sarathi-2023.md).
_ATTENTION["sarathi-2024-causal"] = replace(_ATTENTION["sarathi-2024"], name="sarathi-2024-causal", causal_flops=True)

def known_attention_kernels() -> list[str]:
    return sorted(_ATTENTION)


def get_attention_kernel(name: str) -> AttentionKernel:
    key = str(name).strip().lower().replace("_", "-")
    if key not in _ATTENTION:
        raise HarnessError(f"unknown attention kernel {name!r}; known: {', '.join(known_attention_kernels())}")
    return _ATTENTION[key]


# vLLM's FlashAttention-2 decode as measured on the Ada and Blackwell RTX chips [AIC-DECODE]: (per call s,
# per CTA s, fraction of bandwidth), held-out MAPE over the profile's kept points 14.9 % (L40S) and 15.9 % (RTX PRO
# 6000 Server), where the unmeasured `fa2-ideal` decode (KV at a read test's fraction, no per-call or per-CTA
# cost) scores 74 and 78 %. A part of the same chip takes its sibling's times and fraction (of its own
# bandwidth): the RTX 4090 the L40S's (AD102), the Workstation Edition the Server's (GB202).
FA2_DECODE_MEASURED = {"l40s-48g": (9.02e-6, 0.0142e-6, 0.853),
                        "rtx-pro-6000-server-96g": (10.13e-6, 0.0146e-6, 0.947)}
_FA2_DECODE_SIBLING = {"rtx-4090-24g": "l40s-48g", "rtx-pro-6000-ws-96g": "rtx-pro-6000-server-96g"}


def fa2_decode_source(gpu_name: str) -> str | None:
    """The part whose measured FA2 decode `gpu_name` is priced with (itself or its chip's sibling), or None."""
    name = _FA2_DECODE_SIBLING.get(gpu_name, gpu_name)
    return name if name in FA2_DECODE_MEASURED else None
