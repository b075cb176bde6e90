"""The analytical iteration-time model: PerfModel(deployment).

One iteration processes a batch of sequences; item i brings new_tokens[i] new tokens (a prefill
chunk, or 1 for a decode) on top of context_lens[i] tokens already in its KV cache. Per pipeline
stage and per GPU (all TP ranks do the same work in parallel), the stage time is

    layers_of_stage x [ linear layers + attention + elementwise ops + TP all-reduces ]
  + (first stage) embedding lookup (+ its all-reduce under TP: vocab-parallel embedding)
  + (last stage)  final norm + LM head for one row per sequence (+ logits all-gather under TP)
                  + the engine's CPU overhead (scheduling, input preparation, sampling, output
                    processing, and the driver-to-worker round trip with more than one GPU).
  + (every stage, stacks that price them) kernel launches, eager or as CUDA graphs (launch.py).

Operators (see operators.py for the formulas, deployment.py / hardware.py for the constants):

* linear layers: QKV, attention output, MLP up(+gate), MLP down, sharded by TP (column- then
  row-parallel). Roofline with the token count rounded up to the GEMM tile: a 257-token batch
  pays for 384 rows of FLOPs.
* attention: per sequence, the (query, key) pairs of a causal chunk over its context (a later
  chunk re-reads the KV of the earlier ones), capped by the sliding window; bytes = KV read + Q/O.
* elementwise: fused residual-add + norm (read 2, write 2 hidden vectors per norm), rotary on Q
  and K, the MLP activation (SiLU x up, or GELU), and the KV-cache write (read K, V; write them).
* TP all-reduce: after attention and after the MLP (one per layer for Falcon's parallel
  attention + MLP, whose partial outputs are summed before a single all-reduce, as vLLM's
  falcon.py does), ring algorithm over the TP link.
* LM head: one row per sequence in the batch (the last token of each chunk; for a non-final
  prefill chunk the row is wasted work or skipped by the engine, a difference of one GEMV row).

`batch_times` returns the time of the slowest stage (for pp = 1, the whole iteration). With
pp > 1 the last stage carries the LM head and the CPU overhead, so it is the slowest one;
`pipeline_latency` sums the actual stages plus the sends between them.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from common.errors import HarnessError

from . import operators as ops
from .deployment import Deployment
from . import launch, memory
from .kernels import get_stack, kernels_for
from .moe import ExpertRouting
from .split_kv import DecodeCall
from .batch_pricer import BatchPricer
from .scratch import SCRATCH as _SCRATCH, prepare
from .vllm_releases import padded_array, step_rules

# Components of one stage's time (summing to "total") and the details of "linear".
BREAKDOWN_PARTS = ("linear", "attention", "elementwise", "tp_comm", "embedding", "lm_head", "cpu_overhead", "launch")
LINEAR_PARTS = ("linear.qkv", "linear.attn_out", "linear.mlp_up", "linear.mlp_down")


# Share of HBM for weights, activations and the KV cache: vLLM's `--gpu-memory-utilization` default
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9  # (vllm/config.py, CacheConfig.gpu_memory_utilization = 0.9; 0.92 from 0.32)
# Tokens per KV block: vLLM's and Sarathi-Serve's default (CacheConfig.block_size = 16); the engine
# core's DEFAULT_BLOCK_SIZE says the same (engines.perf may not import it).
DEFAULT_KV_BLOCK_TOKENS = 16


class PerfModel:
    """Iteration times of one deployment. Stateless after construction; thread-safe."""

    def __init__(self, deployment: Deployment) -> None:
        d = deployment
        m = d.model
        gpu = d.gpu
        self.deployment = d
        self.model = m
        self.gpu = gpu
        self.tp, self.pp = d.tp, d.pp
        self.stage_layers = m.layers_per_stage(d.pp)
        bpe = m.bytes_per_param
        h = m.hidden_size
        qh = m.q_heads_per_gpu(d.tp)
        kvh = m.kv_heads_per_gpu(d.tp)
        hd = m.head_dim
        inter = m.intermediate_size // d.tp
        # The engine's kernels on this GPU (kernels.py): GEMM law, attention and elementwise costs.
        self.stack = get_stack(d.stack)
        k = self.kernels = kernels_for(self.stack, gpu.name, gpu.matmul_efficiency, d.attention_kernel)
        # measured: shape-dependent compute efficiency, soft roofline, fixed cost; datasheet: the
        # large-GEMM efficiency at every shape (hardware.py). FP8 weights: the linear layers' GEMMs at
        # the FP8 peak, the same fraction of it (precision.py); the LM head and a router stay 16-bit.
        eff = k.gemm.compute_efficiency if k.gemm.smooth else gpu.matmul_efficiency
        weight_bw = gpu.hbm_bandwidth * k.gemm.stream_efficiency if k.gemm.smooth else gpu.weight_bandwidth
        flops16 = gpu.peak_flops * eff
        flops = gpu.fp8_peak_flops * eff if d.weight_dtype else flops16
        wbpe, kvbpe = d.weight_bytes_per_param, d.kv_bytes_per_element
        self._gemm_smooth, self._gemm_fixed = k.gemm.smooth, k.gemm.fixed_s
        self._tile = d.gemm_tile_tokens
        # The four GEMMs of a layer on one GPU (column-parallel QKV and MLP-up, row-parallel
        # attention-out and MLP-down), as (G, 1) coefficient columns evaluated together.
        self._gemm_shapes = (
            ("linear.qkv", h, (qh + 2 * kvh) * hd),
            ("linear.attn_out", qh * hd, h),
            ("linear.mlp_up", h, m.mlp_in_width // d.tp),
            ("linear.mlp_down", inter, h),
        )
        coeffs = np.array([self._gemm_coefficients(kk, n, flops, weight_bw, bpe, wbpe) for _, kk, n in self._gemm_shapes])
        self._gemm_c, self._gemm_w, self._gemm_a = (coeffs[:, i:i + 1] for i in range(3))
        # An MoE layer (moe.py): the MLP rows above are one expert's; the batch runs T x k rows over
        # the D(T) experts it hits, after a 16-bit router GEMM (hidden x experts).
        self._routing = ExpertRouting.build(m.num_experts, m.experts_per_token) if m.is_moe else None
        self._router = self._gemm_coefficients(h, m.num_experts, flops16, weight_bw, bpe) if m.is_moe else None
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
        self.elementwise_kernels = tuple((name, kern, width * bpe) for name, kern, width in widths) + (
            ("kv_write", ew.kv_write, 2 * kvh * hd * (bpe + kvbpe)),)  # read K, V; write them into the cache
        hbm = gpu.hbm_bandwidth
        self._elementwise_per_token = sum(nbytes * kern.per_byte(hbm) for _, kern, nbytes in self.elementwise_kernels)
        self._elementwise_fixed = sum(kern.fixed_s for _, kern, _ in self.elementwise_kernels)
        # TP all-reduce of the hidden states: twice per layer, once for Falcon's parallel block.
        self._act_bytes_per_token = h * bpe
        self._allreduces_per_layer = 1 if m.parallel_attn_mlp else 2
        self._allreduce = ops.allreduce_curve(d.tp, d.tp_link, self.stack.allreduce).scaled(self._act_bytes_per_token)
        # Attention: 2 matmuls (QK^T, PV) x 2 FLOPs per multiply-add x head_dim x local heads.
        att = k.attention
        self._attn_flops_per_pair = 4.0 * hd * qh
        self._attn_kv_bytes_per_token = 2.0 * kvh * hd * kvbpe
        self._attn_qo_bytes_per_token = 2.0 * qh * hd * bpe
        self._attn_flops = gpu.attention_flops * att.prefill_fa2_fraction
        self._attn_bandwidth = hbm * (att.decode_efficiency or gpu.hbm_efficiency)
        self._attn_causal = att.causal_flops
        self._attn_prefill_fixed_units = math.floor(att.prefill_fixed_s / ops.TIME_QUANTUM_S)
        self._attn_decode_fixed_units = math.floor(att.decode_fixed_s / ops.TIME_QUANTUM_S)
        self._decode_call = None if att.decode_split is None else DecodeCall(
            att.decode_split, sm_count=gpu.sm_count, q_heads=qh, kv_heads=kvh, head_dim=hd,
            kv_bytes_per_token=self._attn_kv_bytes_per_token, qo_bytes_per_token=self._attn_qo_bytes_per_token,
            bandwidth=self._attn_bandwidth, window=m.sliding_window)
        # Embedding gather (read + write a row per token) on the first stage.
        self._embedding_per_token = 2 * self._act_bytes_per_token * ew.embedding.per_byte(hbm)
        self._embedding_fixed = ew.embedding.fixed_s
        # Final norm + LM head (vocab-parallel) + logits all-gather, one row per sequence.
        self._vocab_per_gpu = math.ceil(m.vocab_size / d.tp)
        self._lm_norm_per_row = (4 if ew.fused_add_norm else 2) * h * bpe * ew.norm.per_byte(hbm)
        self._lm_norm_fixed = ew.norm.fixed_s
        self._lm_c, self._lm_w, self._lm_a = self._gemm_coefficients(h, self._vocab_per_gpu, flops16, weight_bw, bpe)
        self._allgather = ops.allgather_curve(d.tp, d.tp_link).scaled(self._vocab_per_gpu * d.tp * bpe)  # by rows
        multi_gpu = d.num_gpus > 1
        self._cpu_fixed = d.cpu_overhead_s + (d.multi_gpu_overhead_s if multi_gpu else 0.0)
        self._cpu_per_seq = d.cpu_overhead_per_seq_s + (d.multi_gpu_overhead_per_seq_s if multi_gpu else 0.0)
        # A shipped vLLM release (vllm_releases.py): batches padded to its capture sizes; async scheduling.
        self.rules = step_rules(self.stack.release, gpu.name, gpu.visible_bytes, d.pp, d.cuda_graphs is not False)
        self._graph_sizes = self.rules.graph_sizes if self.rules else ()
        self._overlap_cpu = bool(self.rules and self.rules.overlap_cpu)
        # Kernel launches, eager or as CUDA graphs (launch.py); None where the stack prices none.
        self.launch = launch.build("eager" if d.cuda_graphs is False else self.stack.graphs, self.stack.launch_s,
                                   self._graph_sizes[-1] if self._graph_sizes else self.stack.graph_max_tokens,
                                   elementwise_kernels=len(self.elementwise_kernels),
                                   gemms=4 + m.is_moe, allreduces_per_layer=self._allreduces_per_layer, tp=d.tp)
        # Stage-to-stage send: hidden states, plus the residual stream Llama-style blocks carry
        # separately (vLLM's PP sends both); Falcon's parallel block has none.
        self._send_bytes_per_token = (1 if m.parallel_attn_mlp else 2) * self._act_bytes_per_token
        # One batch at a time (the simulator's stepped iterations) takes the scalar path below,
        # unless a subclass prices the components its own way.
        self._scalar_rows = type(self)._components is PerfModel._components
        self._gemm_scalars = [tuple(float(x[g, 0]) for x in (self._gemm_c, self._gemm_w, self._gemm_a))
                              for g in range(len(self._gemm_shapes))]
        self._pricer = BatchPricer(self) if self._scalar_rows else None

    # ------------------------------------------------------------ public API
    def batch_times(self, new_tokens: np.ndarray, context_lens: np.ndarray) -> np.ndarray:
        """Seconds of one pipeline stage (the slowest) for each batch; shapes (..., B) -> (...)."""
        if self._scalar_rows and np.ndim(new_tokens) == 1:
            return np.float64(max(self._row_stage_times(new_tokens, context_lens)))
        n, c, shape = prepare(new_tokens, context_lens)
        stages = self._stage_times(self._components(n, c))
        return np.max(stages, axis=0).reshape(shape)

    def iteration_time(self, new_tokens: Sequence[int], context_lens: Sequence[int]) -> float:
        """batch_times for one batch given as sequences of ints (the simulator's stepped iterations)."""
        if self._scalar_rows:
            return max(self._row_stage_times(new_tokens, context_lens))
        return float(self.batch_times(np.asarray(new_tokens), np.asarray(context_lens)))

    def iteration_stage_times(self, new_tokens: Sequence[int], context_lens: Sequence[int]) -> list[float]:
        """stage_times for one batch given as sequences of ints, as a list (the pipelined simulator)."""
        if self._scalar_rows:
            return self._row_stage_times(new_tokens, context_lens)
        return self.stage_times(np.asarray(new_tokens), np.asarray(context_lens)).tolist()

    def decode_run_times(self, base: np.ndarray, lo: int, hi: int) -> np.ndarray:
        """batch_times of the same iterations as decode_run_stage_times, (hi - lo,)."""
        return np.max(self.decode_run_stage_times(base, lo, hi), axis=-1)

    def decode_run_stage_times(self, base: np.ndarray, lo: int, hi: int) -> np.ndarray:
        """(hi - lo, pp) stage_times of decode-only iterations lo..hi-1 of a run whose iteration 0 has
        contexts `base` (iteration i: base + i, one new token each): the simulator's fast-forward."""
        if self._scalar_rows:
            return self._pricer.decode_run_stages(np.asarray(base, dtype=np.int64), lo, hi)
        ctx = np.asarray(base, dtype=np.int64)[None, :] + np.arange(lo, hi, dtype=np.int64)[:, None]
        return self.stage_times(np.ones_like(ctx), ctx)

    def stage_times(self, new_tokens: np.ndarray, context_lens: np.ndarray) -> np.ndarray:
        """Seconds of each pipeline stage for each batch; shapes (..., B) -> (..., pp).
        Stage 0 carries the embedding, the last stage the LM head and the CPU overhead."""
        if self._scalar_rows and np.ndim(new_tokens) == 1:
            return np.array(self._row_stage_times(new_tokens, context_lens))
        n, c, shape = prepare(new_tokens, context_lens)
        stages = self._stage_times(self._components(n, c))
        return np.moveaxis(stages, 0, -1).reshape(*shape, self.pp)

    def pipeline_latency(self, new_tokens: np.ndarray, context_lens: np.ndarray) -> np.ndarray:
        """Seconds for a batch to pass every stage and the sends between them; (..., B) -> (...)."""
        n, c, shape = prepare(new_tokens, context_lens)
        comp = self._components(n, c)
        total = np.sum(self._stage_times(comp), axis=0)
        if self.pp > 1:
            total = total + (self.pp - 1) * self._send(comp["tokens"])
        return total.reshape(shape)

    def pp_send_time(self, num_tokens: int | np.ndarray) -> float | np.ndarray:
        """Activation send between two stages for a batch of `num_tokens` tokens (0 for pp = 1)."""
        t = self._send(np.asarray(num_tokens, dtype=np.float64))
        return float(t) if np.ndim(t) == 0 else t

    def kv_capacity_tokens(self, gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
                           block_size: int = DEFAULT_KV_BLOCK_TOKENS) -> int:
        """KV-cache tokens the deployment holds, sized as its engine sizes it (memory.py: the
        stack's recipe, or the deployment's `kv_memory`); the smallest stage bounds the deployment."""
        d = self.deployment
        return memory.kv_capacity_tokens(d.kv_memory or self.stack.kv_memory, memory.inputs(d, self.rules),
                                         gpu_memory_utilization, block_size)

    def activation_reserve_bytes(self) -> int:
        """What the datasheet recipe reserves before the KV cache: activations + logits (memory.py)."""
        m = memory.inputs(self.deployment)
        return m.activation_bytes + m.logits_bytes

    def breakdown(self, new_tokens: Sequence[int], context_lens: Sequence[int]) -> dict[str, float]:
        """Seconds per operator for one batch, on the slowest stage.

        Keys in BREAKDOWN_PARTS sum to "total" (== iteration_time); LINEAR_PARTS sum to "linear".
        Also: "stage" (index of the slowest stage), "layers" (its layer count), "pp_send".
        """
        if np.ndim(new_tokens) != 1:
            raise HarnessError(f"breakdown prices one batch: expected 1-D sequences, got shape {np.shape(new_tokens)}")
        n, c, _ = prepare(np.asarray(new_tokens), np.asarray(context_lens))
        comp = self._components(n, c)
        stages = self._stage_times(comp)
        s = int(np.argmax(stages[:, 0]))
        layers = self.stage_layers[s]
        active = bool(comp["active"][0])
        first, last = s == 0, s == self.pp - 1
        out: dict[str, float] = {}
        for name in LINEAR_PARTS:
            out[name] = layers * float(comp[name][0]) if active else 0.0
        out["linear"] = layers * float(comp["linear"][0]) if active else 0.0
        out["attention"] = layers * float(comp["attention"][0]) if active else 0.0
        out["elementwise"] = layers * float(comp["elementwise"][0]) if active else 0.0
        out["tp_comm"] = layers * float(comp["tp_comm"][0]) if active else 0.0
        out["embedding"] = float(comp["embedding"][0]) if (active and first) else 0.0
        out["lm_head"] = float(comp["lm_head"][0]) if (active and last) else 0.0
        out["cpu_overhead"] = float(comp["cpu_overhead"][0]) if (active and last) else 0.0
        out["launch"] = self._launch(comp["seqs"][0], comp["tokens"][0], s) if self.launch else 0.0
        out["total"] = float(stages[s, 0])
        if self._overlap_cpu and last:  # async scheduling: only the CPU time the GPU step does not cover shows
            out["cpu_overhead"] = max(0.0, out["total"] - sum(out[k] for k in BREAKDOWN_PARTS if k != "cpu_overhead"))
        out["stage"] = float(s)
        out["layers"] = float(layers)
        out["pp_send"] = float(self._send(comp["tokens"])[0]) if self.pp > 1 else 0.0
        return out

    # ------------------------------------------------------------ internals
    def _gemm_coefficients(self, k: int, n: int, flops: float, bandwidth: float, bpe: int,
                           wbpe: int | None = None) -> tuple[float, float, float]:
        return ops.gemm_coefficients(k, n, flops=flops, bandwidth=bandwidth, bytes_per_elem=bpe,
                                     k_half=self.kernels.gemm.k_half, weight_bytes_per_elem=wbpe)

    def _gemms(self, m: np.ndarray, per_tiled_row, weights, per_row) -> np.ndarray:
        """GEMM times from coefficients, m rows rounded up to the tile."""
        return self._gemm_law(m, ops.tiled(m, self._tile), per_tiled_row, weights, per_row)

    def _gemm_law(self, m: np.ndarray, m_tiled: np.ndarray, per_tiled_row, weights, per_row) -> np.ndarray:
        """The datasheet roofline, or the measured kernel's soft one."""
        if not self._gemm_smooth:
            return ops.gemm_time_from(m, m_tiled, per_tiled_row, weights, per_row)
        return ops.gemm_time_smooth_from(m, m_tiled, per_tiled_row, weights, per_row, self._gemm_fixed)

    def _expert_gemms(self, tokens: np.ndarray) -> list[np.ndarray]:
        """An MoE layer's router + gate/up and down GEMMs over the experts the batch hits (moe.py)."""
        rows, rows_tiled, hit = self._routing.rows(tokens)
        c, w, a = self._gemm_c, self._gemm_w, self._gemm_a
        router = self._gemms(tokens, *self._router)
        return [self._gemm_law(rows, rows_tiled, c[2], w[2] * hit, a[2]) + router,
                self._gemm_law(rows, rows_tiled, c[3], w[3] * hit, a[3])]

    def _expert_gemms_one(self, tokens: float, tiled: float) -> list[float]:
        """_expert_gemms for one batch of `tokens` (`tiled`: rounded up to the tile), in Python floats."""
        rows, rows_tiled, hit = self._routing.rows_one(tokens)
        (c2, w2, a2), (c3, w3, a3) = self._gemm_scalars[2:]
        router = self._gemm_scalar(tokens, tiled, *self._router)
        return [self._gemm_scalar(rows, rows_tiled, c2, w2 * hit, a2) + router,
                self._gemm_scalar(rows, rows_tiled, c3, w3 * hit, a3)]

    def _gemm_scalar(self, m: float, m_tiled: float, per_tiled_row: float, weights: float, per_row: float) -> float:
        return ops.gemm_time_one(m, m_tiled, per_tiled_row, weights, per_row, self._gemm_fixed, self._gemm_smooth)

    def _attention_units(self, n: np.ndarray, c: np.ndarray, scratch) -> np.ndarray:
        units = ops.attention_units(
            n, c, window=self.model.sliding_window, flops_per_pair=self._attn_flops_per_pair,
            kv_bytes_per_token=self._attn_kv_bytes_per_token, qo_bytes_per_token=self._attn_qo_bytes_per_token,
            flops=self._attn_flops, bandwidth=self._attn_bandwidth, scratch=scratch, causal=self._attn_causal,
            prefill_fixed_units=self._attn_prefill_fixed_units, decode_fixed_units=self._attn_decode_fixed_units)
        if self._decode_call is None:
            return units
        return units + self._decode_call.units(n, c, scratch[0])

    def _components(self, n: np.ndarray, c: np.ndarray) -> dict[str, np.ndarray]:
        """Per-row costs: per-layer operator times, per-stage extras, and the token counts.
        Every entry is 0 for a row without tokens."""
        real = n.sum(axis=-1)  # whole numbers: exact in any summation order
        seqs = np.count_nonzero(n, axis=-1).astype(np.float64)
        active = seqs > 0
        # The rows the model runs: a CUDA graph's batch is padded to its capture size (LM head: real rows).
        tokens = padded_array(self._graph_sizes, real) if self._graph_sizes else real
        gemms = list(self._gemms(tokens, self._gemm_c, self._gemm_w, self._gemm_a))
        if self._routing is not None:
            gemms[2:] = self._expert_gemms(tokens)
        comp: dict[str, np.ndarray] = {"tokens": real, "seqs": seqs, "active": active}
        for (name, _, _), t in zip(self._gemm_shapes, gemms):
            comp[name] = t
        linear = gemms[0] + gemms[1] + gemms[2] + gemms[3]
        attention = self._attention_units(n, c, _SCRATCH.views(n.shape, 2, 3)) * ops.TIME_QUANTUM_S
        elementwise = (tokens * self._elementwise_per_token + self._elementwise_fixed) * active
        allreduce = self._allreduce.time(tokens)
        tp_comm = self._allreduces_per_layer * allreduce
        comp["linear"] = linear
        comp["attention"] = attention
        comp["elementwise"] = elementwise
        comp["tp_comm"] = tp_comm
        comp["layer"] = linear + attention + elementwise + tp_comm
        # First stage: embedding gather, then the vocab-parallel embedding's all-reduce under TP.
        comp["embedding"] = (tokens * self._embedding_per_token + self._embedding_fixed) * active + allreduce
        # Last stage: final norm + LM head on one row per sequence + logits all-gather.
        comp["lm_head"] = ((seqs * self._lm_norm_per_row + self._lm_norm_fixed) * active
                           + self._gemms(seqs, self._lm_c, self._lm_w, self._lm_a)
                           + self._allgather.time(seqs))
        cpu = seqs * self._cpu_per_seq + self._cpu_fixed
        cpu *= active
        comp["cpu_overhead"] = cpu
        return comp

    def _row_stage_times(self, new_tokens, context_lens) -> list[float]:
        """Stage times of ONE batch (1-D sequences), bit-identical to `_stage_times(_components(...))`
        on a row: whole-number token counts go to the table-driven BatchPricer (batch_pricer.py),
        anything else (float arrays) to the vectorized path."""
        if isinstance(new_tokens, np.ndarray) or isinstance(context_lens, np.ndarray):
            n, c = np.asarray(new_tokens), np.asarray(context_lens)
            if n.dtype.kind not in "iub" or c.dtype.kind not in "iub":
                n, c, _ = prepare(n[None], c[None])
                return self._stage_times(self._components(n, c))[:, 0].tolist()
            new_tokens, context_lens = n.tolist(), c.tolist()
        try:
            return self._pricer.stage_times(new_tokens, context_lens)
        except TypeError:  # sequences of floats: the tables index by whole numbers
            return self._row_stage_times(np.asarray(new_tokens, dtype=np.float64), np.asarray(context_lens, dtype=np.float64))

    def _stage_times(self, comp: dict[str, np.ndarray]) -> np.ndarray:
        """(pp, rows) seconds of each stage (0 for rows without tokens: every part is 0 there)."""
        last = self.pp - 1
        if last == 0 and not self.launch and not self._overlap_cpu:
            return (self.stage_layers[0] * comp["layer"] + comp["embedding"] + comp["lm_head"]
                    + comp["cpu_overhead"])[None]
        rows = []
        for s, layers in enumerate(self.stage_layers):
            t = layers * comp["layer"]
            if s == 0:
                t = t + comp["embedding"]
            if s == last:
                t = t + comp["lm_head"]
                t = np.maximum(t, comp["cpu_overhead"]) if self._overlap_cpu else t + comp["cpu_overhead"]
            if self.launch:
                t = t + self._launch(comp["seqs"], comp["tokens"], s)
            rows.append(t)
        return np.stack(rows)

    def _launch(self, seqs, tokens, stage: int):
        return self.launch.stage_s(seqs, tokens, self.stage_layers[stage], stage == 0, stage == self.pp - 1)

    def _send(self, tokens: np.ndarray) -> np.ndarray:
        """Activation bytes of the batch over the PP link (see _send_bytes_per_token)."""
        if self.pp == 1:
            return np.zeros(np.shape(tokens))
        return ops.p2p_time(np.asarray(tokens, dtype=np.float64) * self._send_bytes_per_token, self.deployment.pp_link)
