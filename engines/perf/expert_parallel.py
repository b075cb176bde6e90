"""Data-parallel attention with expert-parallel MoE layers: vLLM's
`--data-parallel-size N --enable-expert-parallel` (sources as of vLLM 0.32.0, the installed build).

N DP ranks, each an engine of tp GPUs with its own scheduler and KV cache, run attention and the
dense parts of every layer on their own batch. The MoE layers are shared: EP size = dp x tp GPUs,
each holding E / EP whole experts (FusedMoE with use_ep: no tensor slicing of an expert,
[VLLM-EP] model_executor/layers/fused_moe/layer.py determine_expert_map). A layer's tokens reach
their experts and come back over the node's links, either way vLLM implements it:

* `allgather_reducescatter` (0.32's default, [VLLM-CFG] config/parallel.py
  ParallelConfig.all2all_backend): [VLLM-A2A] AgRsAll2AllManager.dispatch all-gathers every DP
  rank's hidden states (16-bit) with their top-k weights and ids (fp32, int32) over the DP group,
  each GPU runs its local experts over all gathered tokens, and `combine` reduce-scatters the
  hidden states back. Priced with the link's all-gather curve (ops.allgather_curve; a
  reduce-scatter moves the same (p-1)/p bus bytes, nccl-tests doc/PERFORMANCE.md).
* `all2all` (DeepEP-style dispatch, [VLLM-A2A] DeepEPHTAll2AllManager/DeepEPLLAll2AllManager):
  each token's hidden state goes to the GPUs of its k experts, hidden x 2 B x k bytes a token and
  direction, of which (EP - 1) / EP leave the GPU in expectation; priced as one send of a rank's
  bytes over the link's point-to-point curve, each way.

Expert GEMMs on one GPU: the tokens that reach its experts, all ranks' T tokens x k / EP rows in
expectation, over the D(T) / EP of its experts they hit (moe.py's occupancy, the local experts a
uniform 1/EP share of the hit ones), rows padded per expert to the fused kernel's block.

The ranks step together ([VLLM-DP]): v1/engine/core.py DPEngineCoreProc.run_busy_loop runs a
step on every rank while any rank has unfinished requests (`_has_global_unfinished_reqs`, an
all-reduce over the DP group); a rank with nothing scheduled runs `execute_dummy_batch`
(v1/worker/gpu_worker.py: one uniform-decode token). Before each forward, v1/worker/dp_utils.py
coordinate_batch_across_dp all-reduces every rank's token count; when every rank runs a CUDA graph
(the minimum cudagraph mode is not NONE) each rank is padded to the largest rank's graph size
(`_post_process_dp_padding`), the count forward_context.DPMetadata hands the MoE layers. So a
step costs the slowest rank's own work plus the layers' shared MoE time, every rank alike.

Not modelled: TP inside a rank's own dense layers padded to the DP maximum (a rank's dense GEMMs
run on its own graph-padded count), routing skew and expert load imbalance (uniform routing: the
expectation), EPLB's redundant experts, dual-batch overlap (--enable-dbo), the expert activation
and moe_sum moved to the experts' GPU (charged to the rank whose tokens they are: the same total),
EP across nodes, pipeline parallelism with EP.

Sources:
  [VLLM-DP]  vllm 0.32.0: v1/engine/core.py (DPEngineCoreProc.run_busy_loop, _has_global_unfinished_reqs),
             v1/worker/gpu_worker.py (execute_dummy_batch), v1/worker/dp_utils.py
             (coordinate_batch_across_dp, _synchronize_dp_ranks, _post_process_dp_padding),
             v1/worker/gpu_model_runner.py (_determine_batch_execution_and_padding), forward_context.py (DPMetadata).
  [VLLM-A2A] vllm 0.32.0: distributed/device_communicators/all2all.py (AgRsAll2AllManager dispatch/combine).
  [VLLM-CFG] vllm 0.32.0: config/parallel.py (all2all_backend = "allgather_reducescatter").
  [VLLM-EP]  vllm 0.32.0: model_executor/layers/fused_moe/layer.py (FusedMoE, determine_expert_map).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np

from . import operators as ops
from .analytical import PerfModel
from .cpu_costs import CPU_FIELDS
from .links import Curve
from .moe import BLOCK_M, BLOCK_M_SMALL, ExpertRouting
from .vllm_releases import padded

EP_COMMS = ("allgather_reducescatter", "all2all")
TOPK_BYTES = 4 + 4  # a token's top-k weight (fp32) and expert id (int32), per expert: [VLLM-A2A] dispatch
DUMMY_BATCH = ((1,), (0,))  # [VLLM-DP] execute_dummy_batch: one uniform-decode token


def dp_padded_tokens(graph_sizes: tuple[int, ...], tokens: Sequence[int]) -> list[int]:
    """Each rank's token count as the MoE layers see it ([VLLM-DP] _post_process_dp_padding): every
    rank at the largest rank's CUDA-graph size when all of them run a graph, else its own count."""
    if graph_sizes and all(0 < t <= graph_sizes[-1] for t in tokens):
        top = max(padded(graph_sizes, t) for t in tokens)
        return [top] * len(tokens)
    return [int(t) for t in tokens]


@dataclass(frozen=True)
class ExpertParallelLayer:
    """One MoE layer under EP: dispatch, the local experts' GEMMs, combine, for every rank's tokens."""

    dp: int
    shards: int  # EP size: dp x tp GPUs, each with experts / shards whole experts
    hidden_bytes: int  # a token's hidden state, bytes
    top_k: int
    comm: str
    routing: ExpertRouting
    up: tuple[float, float, float]  # gate/up GEMM coefficients of one whole expert
    down: tuple[float, float, float]
    gather: Curve  # all-gather (and reduce-scatter) over the DP ranks, by total bytes
    send: Curve  # one point-to-point send, by bytes
    graph_sizes: tuple[int, ...]
    gemm: Callable[..., float] = field(compare=False, repr=False)  # the rank model's GEMM law

    @property
    def local_experts(self) -> int:
        return self.routing.experts // self.shards

    def dispatch_s(self, tokens: Sequence[int]) -> float:
        """One direction of the token exchange (dispatch; combine costs the same bytes back)."""
        if self.comm == "allgather_reducescatter":
            return self.gather.seconds(float(sum(tokens)) * (self.hidden_bytes + self.top_k * TOPK_BYTES))
        remote = (self.shards - 1) / self.shards
        return self.send.seconds(float(max(tokens)) * self.top_k * self.hidden_bytes * remote)

    def combine_s(self, tokens: Sequence[int]) -> float:
        if self.comm == "allgather_reducescatter":
            return self.gather.seconds(float(sum(tokens)) * self.hidden_bytes)
        return self.dispatch_s(tokens)

    def experts_s(self, total: int) -> float:
        """Gate/up and down GEMMs of one GPU's experts over the rows all ranks' `total` tokens send it."""
        if total <= 0:
            return 0.0
        hit = self.routing.table[min(total, len(self.routing.table) - 1)] / self.shards
        rows = total * self.top_k / self.shards
        # [VLLM-MOE] get_default_config: the block by the tokens the kernel sees against its experts
        arrived = total if self.comm == "allgather_reducescatter" else rows
        block = float(BLOCK_M_SMALL if arrived <= self.local_experts else BLOCK_M)
        rows_tiled = hit * math.ceil(rows / max(hit, 1.0) / block) * block
        (c2, w2, a2), (c3, w3, a3) = self.up, self.down
        return self.gemm(rows, rows_tiled, c2, w2 * hit, a2) + self.gemm(rows, rows_tiled, c3, w3 * hit, a3)

    def layer_s(self, tokens: Sequence[int]) -> float:
        """One MoE layer of a step whose ranks bring `tokens` each (before DP padding)."""
        if not any(tokens):
            return 0.0
        padded_tokens = dp_padded_tokens(self.graph_sizes, tokens)
        return self.dispatch_s(padded_tokens) + self.experts_s(sum(padded_tokens)) + self.combine_s(padded_tokens)


def build_layer(rank: PerfModel) -> ExpertParallelLayer:
    """The EP layer of a rank model: whole experts' GEMM coefficients from the same deployment at tp=1."""
    d = rank.deployment
    whole = rank if d.tp == 1 else PerfModel(replace(d, tp=1, tp_link=None, dp=1, ep=False, ep_link=None))
    m = d.model
    return ExpertParallelLayer(
        dp=d.dp, shards=d.expert_shards, hidden_bytes=m.hidden_size * m.bytes_per_param, top_k=m.experts_per_token,
        comm=d.ep_comm, routing=rank.coeffs.routing, up=whole.coeffs.gemm_scalars[2], down=whole.coeffs.gemm_scalars[3],
        gather=ops.allgather_curve(d.dp, d.ep_link), send=ops.p2p_curve(d.ep_link),
        graph_sizes=rank.coeffs.graph_sizes, gemm=rank.coeffs.gemm_one)


PARTNERS = ("same", "dummy", "none")  # what the other ranks bring to a rank's MoE layers


class ExpertParallelModel(PerfModel):
    """One DP rank of a DP x EP deployment. Its iteration times (`iteration_time`, `batch_times`,
    what SLOs read) are those of a balanced step: every rank running the same batch (`partners`
    "same"). `step_time` prices a lockstep step of different batches (the simulator's); `alone`
    (partners "none") is a rank's own work, `fastest` (partners "dummy": the least a step can hold
    besides this rank's batch) the planner's bound."""

    def __init__(self, deployment: Any, partners: str = "same") -> None:
        super().__init__(deployment)
        if partners not in PARTNERS:
            raise ValueError(f"partners must be one of {PARTNERS}, got {partners!r}")
        self.partners = partners
        self.moe = build_layer(self)
        self._variants: dict[str, ExpertParallelModel] = {partners: self}

    def _variant(self, partners: str) -> ExpertParallelModel:
        if partners not in self._variants:
            d = self.deployment
            if partners == "none":  # the GPU work only: step_time adds the CPU as the stack overlaps it
                d = replace(d, **{name: 0.0 for name in CPU_FIELDS})
            self._variants[partners] = ExpertParallelModel(d, partners)
        return self._variants[partners]

    @property
    def alone(self) -> ExpertParallelModel:
        """This rank's own GPU work: attention, dense layers, router, LM head; no shared MoE, no CPU."""
        return self._variant("none")

    @property
    def fastest(self) -> ExpertParallelModel:
        """This rank's batch with every other rank on the dummy batch: no step holding it is shorter."""
        return self._variant("dummy")

    def _shared(self, tokens: float) -> float:
        if self.partners == "none":
            return 0.0
        others = int(tokens) if self.partners == "same" else DUMMY_BATCH[0][0]
        return self.moe.layer_s([int(tokens)] + [others] * (self.deployment.dp - 1))

    def _expert_gemms(self, tokens: np.ndarray) -> list[np.ndarray]:
        """The router on this rank's tokens; the whole EP layer in the gate/up slot, 0 in the down one."""
        router = self.coeffs.gemms(tokens, *self.coeffs.router)
        shared = np.vectorize(self._shared, otypes=[np.float64])(tokens) if np.size(tokens) else np.zeros(np.shape(tokens))
        return [router + shared, np.zeros(np.shape(tokens))]

    def _expert_gemms_one(self, tokens: float, tiled: float) -> list[float]:
        k = self.coeffs
        return [k.gemm_one(tokens, tiled, *k.router) + self._shared(tokens), 0.0]

    def step_time(self, batches: Sequence[tuple[Sequence[int], Sequence[int]] | None]) -> float:
        """Seconds of one lockstep step: the slowest rank's own GPU work plus every layer's shared MoE
        time over all ranks' tokens, and each rank's CPU work as the stack runs it (after its GPU
        work, or hidden behind the step under async scheduling); a rank without a batch (None) runs
        the dummy batch (no requests to schedule or sample: the fixed CPU cost only)."""
        parts = [b if b is not None and len(b[0]) else DUMMY_BATCH for b in batches]
        shared = self.stage_layers[0] * self.moe.layer_s([int(sum(n)) for n, _ in parts])
        gpu = [self.alone.iteration_time(n, c) for n, c in parts]
        k = self.coeffs
        cpu = [k.cpu_fixed if b is None else sum(1 for x in b[0] if x) * k.cpu_per_seq + k.cpu_fixed
               for b in batches]
        if k.overlap_cpu:
            return max(max(gpu) + shared, max(cpu))
        return max(g + c for g, c in zip(gpu, cpu)) + shared
