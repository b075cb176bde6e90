"""The analytical model's coefficients: every per-deployment constant the iteration-time formulas
multiply by (analytical.py's module docstring gives the formulas), built once from a deployment
by `build_coefficients`, frozen and public.

Two readers price with the same numbers: PerfModel's vectorized path (arrays of batches) and
BatchPricer's one-batch path (Python floats, batch_pricer.py). Both read them here, so that
neither reaches into the other and the two paths cannot drift onto different constants.
The pure helpers on them (`gemms`, `gemm_one`, `launch_s`) are the model's GEMM law and launch
price, evaluated with the same IEEE operations by both paths.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import launch as launch_mod
from . import operators as ops
from .deployment import Deployment
from .kernels import EngineStack, Kernels
from .launch import LaunchModel
from .links import Curve
from .moe import ExpertRouting
from .split_kv import DecodeCall
from .vllm_releases import StepRules

Gemm = tuple[float, float, float]  # (seconds per tiled row of compute, weight seconds, seconds per row)


@dataclass(frozen=True, eq=False)
class AttentionCoefficients:
    """One layer's attention on one GPU: the constants operators.attention_units takes."""

    window: int | None  # sliding window, tokens (None: full attention)
    flops_per_pair: float  # 2 matmuls (QK^T, PV) x 2 FLOPs per multiply-add x head_dim x local heads
    kv_bytes_per_token: float
    qo_bytes_per_token: float
    flops: float  # achievable FLOP/s of the prefill kernel
    bandwidth: float  # achievable B/s of the decode kernel
    causal: bool  # the kernel skips the masked half of a causal chunk
    prefill_fixed_units: int  # a call's fixed cost, in whole TIME_QUANTUM_S units
    decode_fixed_units: int
    decode_call: DecodeCall | None  # the split-KV decode kernel (split_kv.py), or None
    mixed_decode_rows: int = 0  # a decode's padded query tile in a mixed step (kernels.py [FA2-VARLEN])
    decode_seq_units: int = 0  # each decode's own cost (its CTAs: one per KV head on this GPU), whole units

    def units(self, n: np.ndarray, c: np.ndarray, scratch) -> np.ndarray:
        """Per-row attention of one layer, in whole TIME_QUANTUM_S units (the split-KV call's included)."""
        units = ops.attention_units(
            n, c, window=self.window, flops_per_pair=self.flops_per_pair,
            kv_bytes_per_token=self.kv_bytes_per_token, qo_bytes_per_token=self.qo_bytes_per_token,
            flops=self.flops, bandwidth=self.bandwidth, scratch=scratch, causal=self.causal,
            prefill_fixed_units=self.prefill_fixed_units, decode_fixed_units=self.decode_fixed_units,
            mixed_decode_rows=self.mixed_decode_rows, decode_seq_units=self.decode_seq_units)
        if self.decode_call is None:
            return units
        return units + self.decode_call.units(n, c, scratch[0])


@dataclass(frozen=True, eq=False)
class Coefficients:
    """Per-deployment constants of one pipeline stage on one GPU (every TP rank does the same work)."""

    stage_layers: tuple[int, ...]  # layers of each pipeline stage
    tile: int  # GEMM rows are rounded up to this many tokens
    gemm_smooth: bool  # the measured kernel's soft roofline (else the datasheet's hard one)
    gemm_fixed: float  # the measured kernel's fixed seconds per GEMM
    # The four GEMMs of a layer (column-parallel QKV and MLP-up, row-parallel attention-out and
    # MLP-down): (name, k, n), and their coefficients as (G, 1) columns evaluated together.
    gemm_shapes: tuple[tuple[str, int, int], ...]
    gemm_c: np.ndarray
    gemm_w: np.ndarray
    gemm_a: np.ndarray
    gemm_scalars: tuple[Gemm, ...]  # the same, one (c, w, a) of Python floats per GEMM
    routing: ExpertRouting | None  # an MoE layer's expert occupancy (moe.py), None for a dense model
    router: Gemm | None  # the MoE router's 16-bit GEMM (hidden x experts)
    elementwise_kernels: tuple  # (name, kernel, bytes per token) of the bandwidth-bound kernels of a layer
    elementwise_per_token: float
    elementwise_fixed: float
    act_bytes_per_token: int  # one token's hidden state
    allreduces_per_layer: int  # 2, or 1 for Falcon's parallel attention + MLP
    allreduce: Curve  # TP all-reduce of the hidden states, by tokens
    attention: AttentionCoefficients
    embedding_per_token: float
    embedding_fixed: float
    vocab_per_gpu: int
    lm_norm_per_row: float
    lm_norm_fixed: float
    lm_head: Gemm  # the vocab-parallel LM head, 16-bit
    allgather: Curve  # the logits all-gather, by rows
    cpu_fixed: float  # the engine's CPU seconds per iteration
    cpu_per_seq: float  # and per sequence of the batch
    graph_sizes: tuple[int, ...]  # a shipped vLLM release's CUDA-graph capture sizes (() if none)
    overlap_cpu: bool  # async scheduling: the last stage costs max(GPU, CPU)
    launch: LaunchModel | None  # kernel launches (launch.py); None where the stack prices none
    send_bytes_per_token: int  # stage-to-stage send

    @property
    def pp(self) -> int:
        return len(self.stage_layers)

    def gemms(self, m: np.ndarray, per_tiled_row, weights, per_row) -> np.ndarray:
        """GEMM times from coefficients, m rows rounded up to the tile."""
        return self.gemm_law(m, ops.tiled(m, self.tile), per_tiled_row, weights, per_row)

    def gemm_law(self, m: np.ndarray, m_tiled: np.ndarray, per_tiled_row, weights, per_row) -> np.ndarray:
        """The datasheet roofline, or the measured kernel's soft one."""
        if not self.gemm_smooth:
            return ops.gemm_time_from(m, m_tiled, per_tiled_row, weights, per_row)
        return ops.gemm_time_smooth_from(m, m_tiled, per_tiled_row, weights, per_row, self.gemm_fixed)

    def gemm_one(self, m: float, m_tiled: float, per_tiled_row: float, weights: float, per_row: float) -> float:
        """gemm_law for one Python float m > 0, bit for bit."""
        return ops.gemm_time_one(m, m_tiled, per_tiled_row, weights, per_row, self.gemm_fixed, self.gemm_smooth)

    def launch_s(self, seqs, tokens, stage: int):
        """Kernel-launch seconds of `stage` (self.launch must not be None)."""
        return self.launch.stage_s(seqs, tokens, self.stage_layers[stage], stage == 0, stage == self.pp - 1)


def build_coefficients(d: Deployment, stack: EngineStack, k: Kernels, rules: StepRules | None) -> Coefficients:
    """The coefficients of deployment `d` on its engine's kernels `k` (kernels.py) and, for a shipped
    vLLM release, its step rules (vllm_releases.py)."""
    m = d.model
    gpu = d.gpu
    bpe = m.bytes_per_param
    h = m.hidden_size
    qh = m.q_heads_per_gpu(d.tp)
    kvh = m.kv_heads_per_gpu(d.tp)
    hd = m.head_dim
    inter = m.intermediate_size // d.tp
    # measured: shape-dependent compute efficiency, soft roofline, fixed cost; datasheet: the
    # large-GEMM efficiency at every shape (hardware.py). FP8 weights: the linear layers' GEMMs at
    # the FP8 peak, the same fraction of it (precision.py); the LM head and a router stay 16-bit.
    eff = k.gemm.compute_efficiency if k.gemm.smooth else gpu.matmul_efficiency
    weight_bw = gpu.hbm_bandwidth * k.gemm.stream_efficiency if k.gemm.smooth else gpu.weight_bandwidth
    flops16 = gpu.peak_flops * eff
    flops = gpu.fp8_peak_flops * eff if d.weight_dtype else flops16
    wbpe, kvbpe = d.weight_bytes_per_param, d.kv_bytes_per_element

    def gemm(kk: int, n: int, fl: float, wb: int | None = None) -> Gemm:
        return ops.gemm_coefficients(kk, n, flops=fl, bandwidth=weight_bw, bytes_per_elem=bpe,
                                     k_half=k.gemm.k_half, weight_bytes_per_elem=wb)

    gemm_shapes = (
        ("linear.qkv", h, (qh + 2 * kvh) * hd),
        ("linear.attn_out", qh * hd, h),
        ("linear.mlp_up", h, m.mlp_in_width // d.tp),
        ("linear.mlp_down", inter, h),
    )
    coeffs = np.array([gemm(kk, n, flops, wbpe) for _, kk, n in gemm_shapes])
    gemm_c, gemm_w, gemm_a = (coeffs[:, i:i + 1] for i in range(3))
    # Bandwidth-bound kernels of a layer on one GPU: (name, kernel, bytes per token). Unfused, the
    # residual add (read 2, write 1) and RMSNorm (read 1, write 1) are two kernels per norm.
    ew = k.elementwise
    norm_kernels = ([("norm", ew.norm, 4 * h)] if ew.fused_add_norm
                    else [("norm", ew.norm, 2 * h), ("add", ew.add, 3 * h)]) * m.norms_per_layer
    widths = norm_kernels + [
        ("rope", ew.rope, 2 * (qh + kvh) * hd),  # read + write Q and K
        ("act", ew.act, (3 if m.gated_mlp else 2) * inter * max(1, m.experts_per_token)),  # SiLU(gate) * up, or GELU
    ]
    if m.qk_norm:  # Qwen3: RMSNorm over the query and the key heads, read + write each
        widths += [("q_norm", ew.norm, 2 * qh * hd), ("k_norm", ew.norm, 2 * kvh * hd)]
    if m.is_moe:  # moe.py [VLLM-MOE] moe_sum: read each token's k expert outputs, write their sum
        widths.append(("moe_sum", ew.add, (m.experts_per_token + 1) * h))
    elementwise_kernels = tuple((name, kern, width * bpe) for name, kern, width in widths) + (
        ("kv_write", ew.kv_write, 2 * kvh * hd * (bpe + kvbpe)),)  # read K, V; write them into the cache
    hbm = gpu.hbm_bandwidth
    act_bytes_per_token = h * bpe
    allreduces_per_layer = 1 if m.parallel_attn_mlp else 2
    vocab_per_gpu = math.ceil(m.vocab_size / d.tp)
    multi_gpu = d.num_gpus > 1
    graph_sizes = rules.graph_sizes if rules else ()
    return Coefficients(
        stage_layers=tuple(m.layers_per_stage(d.pp)),
        tile=d.gemm_tile_tokens,
        gemm_smooth=k.gemm.smooth,
        gemm_fixed=k.gemm.fixed_s,
        gemm_shapes=gemm_shapes,
        gemm_c=gemm_c, gemm_w=gemm_w, gemm_a=gemm_a,
        gemm_scalars=tuple(tuple(float(x[g, 0]) for x in (gemm_c, gemm_w, gemm_a)) for g in range(len(gemm_shapes))),
        # An MoE layer (moe.py): the MLP rows above are one expert's; the batch runs T x k rows over
        # the D(T) experts it hits, after a 16-bit router GEMM (hidden x experts).
        routing=ExpertRouting.build(m.num_experts, m.experts_per_token) if m.is_moe else None,
        router=gemm(h, m.num_experts, flops16) if m.is_moe else None,
        elementwise_kernels=elementwise_kernels,
        elementwise_per_token=sum(nbytes * kern.per_byte(hbm) for _, kern, nbytes in elementwise_kernels),
        elementwise_fixed=sum(kern.fixed_s for _, kern, _ in elementwise_kernels),
        act_bytes_per_token=act_bytes_per_token,
        allreduces_per_layer=allreduces_per_layer,
        allreduce=ops.allreduce_curve(d.tp, d.tp_link, stack.allreduce).scaled(act_bytes_per_token),
        attention=_attention(d, k, qh, kvh, hd, bpe, kvbpe),
        # Embedding gather (read + write a row per token) on the first stage.
        embedding_per_token=2 * act_bytes_per_token * ew.embedding.per_byte(hbm),
        embedding_fixed=ew.embedding.fixed_s,
        # Final norm + LM head (vocab-parallel) + logits all-gather, one row per sequence.
        vocab_per_gpu=vocab_per_gpu,
        lm_norm_per_row=(4 if ew.fused_add_norm else 2) * h * bpe * ew.norm.per_byte(hbm),
        lm_norm_fixed=ew.norm.fixed_s,
        lm_head=gemm(h, vocab_per_gpu, flops16),
        allgather=ops.allgather_curve(d.tp, d.tp_link).scaled(vocab_per_gpu * d.tp * bpe),  # by rows
        cpu_fixed=d.cpu_overhead_s + (d.multi_gpu_overhead_s if multi_gpu else 0.0),
        cpu_per_seq=d.cpu_overhead_per_seq_s + (d.multi_gpu_overhead_per_seq_s if multi_gpu else 0.0),
        # A shipped vLLM release (vllm_releases.py): batches padded to its capture sizes; async scheduling.
        graph_sizes=graph_sizes,
        overlap_cpu=bool(rules and rules.overlap_cpu),
        launch=launch_mod.build("eager" if d.cuda_graphs is False else stack.graphs, stack.launch_s,
                                graph_sizes[-1] if graph_sizes else stack.graph_max_tokens,
                                elementwise_kernels=len(elementwise_kernels),
                                gemms=4 + m.is_moe, allreduces_per_layer=allreduces_per_layer, tp=d.tp),
        # Stage-to-stage send: hidden states, plus the residual stream Llama-style blocks carry
        # separately (vLLM's PP sends both: models/llama.py IntermediateTensors "hidden_states",
        # "residual"); Falcon's parallel block has none, nor do the LayerNorm blocks of GPT-2/GPT-3
        # and OPT, whose residual is the hidden state (models/gpt2.py, opt.py send "hidden_states"
        # alone; so does nanoGPT's Block, x = x + attn(ln_1(x)), the first Sarathi paper's engine).
        send_bytes_per_token=(1 if m.parallel_attn_mlp or m.layer_norm else 2) * act_bytes_per_token,
    )


def _attention(d: Deployment, k: Kernels, qh: int, kvh: int, hd: int, bpe: int, kvbpe: int) -> AttentionCoefficients:
    gpu, att = d.gpu, k.attention
    kv_bytes_per_token = 2.0 * kvh * hd * kvbpe
    qo_bytes_per_token = 2.0 * qh * hd * bpe
    bandwidth = gpu.hbm_bandwidth * (att.decode_efficiency or gpu.hbm_efficiency)
    window = d.model.sliding_window
    return AttentionCoefficients(
        window=window,
        flops_per_pair=4.0 * hd * qh,
        kv_bytes_per_token=kv_bytes_per_token,
        qo_bytes_per_token=qo_bytes_per_token,
        flops=gpu.attention_flops * att.prefill_fa2_fraction,
        bandwidth=bandwidth,
        causal=att.causal_flops,
        prefill_fixed_units=math.floor(att.prefill_fixed_s / ops.TIME_QUANTUM_S),
        decode_fixed_units=math.floor(att.decode_fixed_s / ops.TIME_QUANTUM_S),
        decode_call=None if att.decode_split is None else DecodeCall(
            att.decode_split, sm_count=gpu.sm_count, q_heads=qh, kv_heads=kvh, head_dim=hd,
            kv_bytes_per_token=kv_bytes_per_token, qo_bytes_per_token=qo_bytes_per_token,
            bandwidth=bandwidth, window=window),
        mixed_decode_rows=att.mixed_decode_rows,
        decode_seq_units=math.floor(att.decode_per_cta_s * kvh / ops.TIME_QUANTUM_S))
