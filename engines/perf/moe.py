"""A mixture-of-experts layer's routed FFN: which expert weights a batch reads, the rows it computes.

A batch of T tokens, each routed to k of E experts, runs T x k expert-FFN rows (the FLOPs of k
dense FFNs a token) but reads the weights of the distinct experts it hits only. Under uniform,
independent routing (each token's k experts a uniformly drawn k-subset, tokens independent) an
expert is missed by one token with probability 1 - k/E, by all T with (1 - k/E)^T, so

    expected distinct experts  D(T) = E (1 - (1 - k/E)^T)      (D(1) = k, D(T) -> E as T grows)

the occupancy ("balls into bins") expectation, [OCCUPANCY]. That MoE decode time follows the
count of activated experts, and that a batch's union of experts grows fast (Qwen3's k/E = 1/16),
is measured in [OEA]. Real routers are skewed; for independently routed tokens a skewed router
hits fewer experts on average (1 - (1 - p)^T is concave in an expert's share p), so the uniform
case is an upper estimate of the weight traffic at a given T.

How the engine runs it ([VLLM-MOE]): a replicated router GEMM (hidden x E, 16-bit), then
vLLM's fused MoE kernels: one grouped GEMM over every hit expert for gate+up (w13), SiLU x up,
one for down (w2), and a sum of each token's k outputs (moe_sum); each expert's token rows are
padded to the kernel's BLOCK_SIZE_M. With tensor parallelism every rank holds a 1/tp slice of
every expert's matrices (w13 column-split, w2 row-split: FusedMoE's intermediate_size // tp_size)
and the layer ends in the usual all-reduce; expert parallelism is not modelled.

Sources:
  [OCCUPANCY] W. Feller, An Introduction to Probability Theory and Its Applications, vol. I
      (3rd ed., 1968), ch. IV: the occupancy problem, expected number of occupied cells.
  [OEA] C.-A. Oncescu et al. (incl. T. Dao), "Opportunistic Expert Activation: Batch-Aware Expert
      Routing for Faster Decode Without Retraining", arXiv:2511.02237 (2025): MoE decode latency is
      governed by the number of activated experts (Qwen3-30B-A3B, Qwen3-235B-A22B).
  [VLLM-MOE] vllm-project/vllm: vllm/model_executor/layers/fused_moe/fused_moe.py
      (fused_experts_impl; get_default_config: BLOCK_SIZE_M 16 when M <= E, else 64; tuned
      per-device configs override it) and fused_moe/layer.py (FusedMoE: intermediate_size_per_partition
      = intermediate_size // tp_size); vllm/model_executor/models/mixtral.py (router: ReplicatedLinear,
      quant_config=None).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

BLOCK_M_SMALL = 16  # [VLLM-MOE] get_default_config: tokens M <= E
BLOCK_M = 64  # [VLLM-MOE] otherwise


def expected_distinct_experts(tokens: int, experts: int, top_k: int) -> float:
    """E (1 - (1 - k/E)^T): the experts a batch of `tokens` hits on average under uniform routing."""
    return experts * (1.0 - (1.0 - top_k / experts) ** tokens)


@dataclass(frozen=True)
class ExpertRouting:
    """The expected expert traffic of a batch, vectorized (`rows`) or for one batch (`rows_one`);
    both read the same table of D(T), so they agree bit for bit."""

    experts: int
    top_k: int
    table: tuple[float, ...]  # D(0), D(1), ... until D(T) rounds to E

    @classmethod
    def build(cls, experts: int, top_k: int) -> ExpertRouting:
        table = [0.0]
        while table[-1] < experts:
            table.append(expected_distinct_experts(len(table), experts, top_k))
        return cls(experts, top_k, tuple(table))

    def distinct(self, tokens: np.ndarray) -> np.ndarray:
        """D(T) for token counts (whole numbers, float64)."""
        index = np.minimum(tokens, len(self.table) - 1).astype(np.int64)
        return np.asarray(self.table)[index]

    def rows(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(rows T k, rows padded per hit expert D ceil(T k / D / block) block, D) for each count."""
        hit = self.distinct(tokens)
        rows = tokens * float(self.top_k)
        block = np.where(tokens <= self.experts, float(BLOCK_M_SMALL), float(BLOCK_M))
        per_expert = np.ceil(rows / np.maximum(hit, 1.0) / block) * block
        return rows, hit * per_expert, hit

    def rows_one(self, tokens: float) -> tuple[float, float, float]:
        """`rows` for one token count, in Python floats (the same IEEE operations)."""
        hit = self.table[min(int(tokens), len(self.table) - 1)]
        rows = tokens * float(self.top_k)
        block = float(BLOCK_M_SMALL) if tokens <= self.experts else float(BLOCK_M)
        per_expert = math.ceil(rows / max(hit, 1.0) / block) * block
        return rows, hit * per_expert, hit
