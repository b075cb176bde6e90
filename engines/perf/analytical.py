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

from collections.abc import Sequence

import numpy as np

from common.errors import HarnessError

from . import memory
from . import operators as ops
from .batch_pricer import BatchPricer
from .decode_runs import slowest_stage
from .coefficients import build_coefficients
from .deployment import Deployment
from .kernels import get_stack, kernels_for
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
        self.deployment = d
        self.model = d.model
        self.gpu = d.gpu
        self.tp, self.pp = d.tp, d.pp
        self.stage_layers = d.model.layers_per_stage(d.pp)
        # The engine's kernels on this GPU (kernels.py): GEMM law, attention and elementwise costs.
        self.stack = get_stack(d.stack)
        self.kernels = kernels_for(self.stack, d.gpu.name, d.gpu.matmul_efficiency, d.attention_kernel)
        # A shipped vLLM release (vllm_releases.py): batches padded to its capture sizes; async scheduling.
        self.rules = step_rules(self.stack.release, d.gpu.name, d.gpu.visible_bytes, d.pp, d.cuda_graphs is not False)
        # Every constant the formulas multiply by, built once (coefficients.py).
        self.coeffs = k = build_coefficients(d, self.stack, self.kernels, self.rules)
        self.elementwise_kernels = k.elementwise_kernels
        self.launch = k.launch  # kernel launches (launch.py); None where the stack prices none
        # One batch at a time (the simulator's stepped iterations) takes the scalar path below,
        # unless a subclass prices the components its own way.
        self._scalar_rows = type(self)._components is PerfModel._components
        self._pricer = BatchPricer(k, self._expert_gemms_one if k.routing is not None else None) if self._scalar_rows else None
        # The simulator's calls a decode run straight to the pricer: what the methods below return (unless overridden).
        for name, direct in (("decode_run_times", "decode_run_list"), ("decode_time_floor", "decode_floor"),
                             ("alone_decode_times", "alone_decode_times")) if self._scalar_rows else ():
            if getattr(type(self), name) is getattr(PerfModel, name):
                setattr(self, name, getattr(self._pricer, direct))

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
            if type(new_tokens) is tuple and type(context_lens) is tuple:  # a Batch's (the loops'): straight to the pricer
                try:
                    return self._pricer.iteration_time(new_tokens, context_lens)
                except TypeError:  # floats: _row_stage_times' way
                    pass
            return max(self._row_stage_times(new_tokens, context_lens))
        return float(self.batch_times(np.asarray(new_tokens), np.asarray(context_lens)))

    def iteration_stage_times(self, new_tokens: Sequence[int], context_lens: Sequence[int]) -> list[float]:
        """stage_times for one batch given as sequences of ints, as a list (the pipelined simulator)."""
        if self._scalar_rows:
            return self._row_stage_times(new_tokens, context_lens)
        return self.stage_times(np.asarray(new_tokens), np.asarray(context_lens)).tolist()

    def chunk_run_times(self, new_tokens: tuple, context_lens: tuple, k: int) -> list[float] | None:
        """iteration_time of each of k rows of a chunk run (BatchPricer.chunk_run_times); None where
        this model prices its components its own way or the batch is not one."""
        return self._pricer.chunk_run_times(new_tokens, context_lens, k) if self._scalar_rows else None

    def decode_time_floor(self, batch_size: int) -> float | None:
        """A lower bound of iteration_time for any decode-only batch of `batch_size` sequences
        (BatchPricer.decode_floor); None where this model prices its components its own way."""
        return self._pricer.decode_floor(batch_size) if self._scalar_rows else None

    def alone_decode_times(self, top: int) -> list[float] | None:
        """Per context c (0..top at least), decode_run_times([c], 0, 1)[0]: a lone sequence's decode
        run is a slice of it (BatchPricer.alone_decode_times); None where this model prices its
        components its own way."""
        return self._pricer.alone_decode_times(top) if self._scalar_rows else None

    def decode_run_times(self, base: Sequence[int], lo: int, hi: int) -> list[float]:
        """batch_times of the same iterations as decode_run_stage_times, hi - lo floats."""
        if self._scalar_rows:
            return self._pricer.decode_run_list(base, lo, hi)
        return slowest_stage(self.decode_run_stage_times(base, lo, hi)).tolist()

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
        out["launch"] = self.coeffs.launch_s(comp["seqs"][0], comp["tokens"][0], s) if self.launch else 0.0
        out["total"] = float(stages[s, 0])
        if self.coeffs.overlap_cpu and last:  # async scheduling: only the CPU time the GPU step does not cover shows
            out["cpu_overhead"] = max(0.0, out["total"] - sum(out[k] for k in BREAKDOWN_PARTS if k != "cpu_overhead"))
        out["stage"] = float(s)
        out["layers"] = float(layers)
        out["pp_send"] = float(self._send(comp["tokens"])[0]) if self.pp > 1 else 0.0
        return out

    # ------------------------------------------------------------ internals
    def _expert_gemms(self, tokens: np.ndarray) -> list[np.ndarray]:
        """An MoE layer's router + gate/up and down GEMMs over the experts the batch hits (moe.py)."""
        k = self.coeffs
        rows, rows_tiled, hit = k.routing.rows(tokens)
        c, w, a = k.gemm_c, k.gemm_w, k.gemm_a
        router = k.gemms(tokens, *k.router)
        return [k.gemm_law(rows, rows_tiled, c[2], w[2] * hit, a[2]) + router,
                k.gemm_law(rows, rows_tiled, c[3], w[3] * hit, a[3])]

    def _expert_gemms_one(self, tokens: float, tiled: float) -> list[float]:
        """_expert_gemms for one batch of `tokens` (`tiled`: rounded up to the tile), in Python floats."""
        k = self.coeffs
        rows, rows_tiled, hit = k.routing.rows_one(tokens)
        (c2, w2, a2), (c3, w3, a3) = k.gemm_scalars[2:]
        router = k.gemm_one(tokens, tiled, *k.router)
        return [k.gemm_one(rows, rows_tiled, c2, w2 * hit, a2) + router,
                k.gemm_one(rows, rows_tiled, c3, w3 * hit, a3)]

    def _components(self, n: np.ndarray, c: np.ndarray) -> dict[str, np.ndarray]:
        """Per-row costs: per-layer operator times, per-stage extras, and the token counts.
        Every entry is 0 for a row without tokens."""
        k = self.coeffs
        real = n.sum(axis=-1)  # whole numbers: exact in any summation order
        seqs = np.count_nonzero(n, axis=-1).astype(np.float64)
        active = seqs > 0
        # The rows the model runs: a CUDA graph's batch is padded to its capture size (LM head: real rows).
        tokens = padded_array(k.graph_sizes, real) if k.graph_sizes else real
        gemms = list(k.gemms(tokens, k.gemm_c, k.gemm_w, k.gemm_a))
        if k.routing is not None:
            gemms[2:] = self._expert_gemms(tokens)
        comp: dict[str, np.ndarray] = {"tokens": real, "seqs": seqs, "active": active}
        for (name, _, _), t in zip(k.gemm_shapes, gemms):
            comp[name] = t
        linear = gemms[0] + gemms[1] + gemms[2] + gemms[3]
        attention = k.attention.units(n, c, _SCRATCH.views(n.shape, 2, 3)) * ops.TIME_QUANTUM_S
        elementwise = (tokens * k.elementwise_per_token + k.elementwise_fixed) * active
        allreduce = k.allreduce.time(tokens)
        tp_comm = k.allreduces_per_layer * allreduce
        comp["linear"] = linear
        comp["attention"] = attention
        comp["elementwise"] = elementwise
        comp["tp_comm"] = tp_comm
        comp["layer"] = linear + attention + elementwise + tp_comm
        # First stage: embedding gather, then the vocab-parallel embedding's all-reduce under TP.
        comp["embedding"] = (tokens * k.embedding_per_token + k.embedding_fixed) * active + allreduce
        # Last stage: final norm + LM head on one row per sequence + logits all-gather.
        comp["lm_head"] = ((seqs * k.lm_norm_per_row + k.lm_norm_fixed) * active
                           + k.gemms(seqs, *k.lm_head)
                           + k.allgather.time(seqs))
        cpu = seqs * k.cpu_per_seq + k.cpu_fixed
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
        if last == 0 and not self.launch and not self.coeffs.overlap_cpu:
            return (self.stage_layers[0] * comp["layer"] + comp["embedding"] + comp["lm_head"]
                    + comp["cpu_overhead"])[None]
        rows = []
        for s, layers in enumerate(self.stage_layers):
            t = layers * comp["layer"]
            if s == 0:
                t = t + comp["embedding"]
            if s == last:
                t = t + comp["lm_head"]
                t = np.maximum(t, comp["cpu_overhead"]) if self.coeffs.overlap_cpu else t + comp["cpu_overhead"]
            if self.launch:
                t = t + self.coeffs.launch_s(comp["seqs"], comp["tokens"], s)
            rows.append(t)
        return np.stack(rows)

    def _send(self, tokens: np.ndarray) -> np.ndarray:
        """Activation bytes of the batch over the PP link (see Coefficients.send_bytes_per_token)."""
        if self.pp == 1:
            return np.zeros(np.shape(tokens))
        return ops.p2p_time(np.asarray(tokens, dtype=np.float64) * self.coeffs.send_bytes_per_token, self.deployment.pp_link)
