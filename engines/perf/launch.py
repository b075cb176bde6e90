"""Kernel launches: what an iteration pays the CPU to start its kernels, eagerly or as CUDA graphs.

Eager PyTorch launches every kernel from Python: `launch_s` per kernel, times the kernels a stage
runs (per layer: the four GEMMs, the MoE router, attention, each elementwise kernel of the stack,
the TP all-reduces; the first stage adds the embedding and its all-reduce; the last the final
norm, the LM head and the logits all-gather). Added to the stage time: a serial model, an upper
bound on what the GPU cannot hide behind its own work.

A CUDA graph is submitted with one cudaGraphLaunch (CUDA C++ Programming Guide, "CUDA Graphs"),
priced as one launch. GRAPH_MODES:
  eager               every kernel launched (Sarathi-Serve: kernels.py STACKS notes).
  full-decode         vLLM V0: a decode-only batch of at most graph_max_tokens sequences replays
                      one captured graph; every other batch is eager (vllm/worker/model_runner.py
                      `_use_captured_graph`: decode_only and batch_size <= max captured).
  full-and-piecewise  vLLM V1 (kernels.py [VLLM-V1]): a decode-only batch within the captured
                      sizes replays one full graph; any other batch of at most graph_max_tokens
                      tokens replays one piece per layer plus one (the graph split at each attention
                      op) and launches attention and its KV-cache write eagerly; larger ones are eager.
The LM head and its all-gather run outside the model's graph in both vLLM versions (compute_logits
is called after the captured forward): always launched.

LAUNCH_S: the cost of one launch through the CUDA runtime and driver, "about 4-6 us" measured on a
CUDA 13 / RTX 5070 Ti host (susun-blog.com, "pegainfer (3): From Launch Overhead to CUDA Graph",
2025); the low end, so graphs' saving is if anything understated. No measurement of PyTorch's own
per-op dispatch on top of it is cited here, so none is added.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from common.errors import HarnessError

LAUNCH_S = 4e-6
GRAPH_MODES = ("eager", "full-decode", "full-and-piecewise")
_EAGER_ATTENTION_KERNELS = 2  # outside a piecewise graph: the KV-cache write and the attention call


@dataclass(frozen=True)
class LaunchModel:
    """Launch seconds of one pipeline stage for batches of `seqs` sequences and `tokens` tokens."""

    mode: str
    launch_s: float
    graph_max_tokens: int
    layer_kernels: int  # eager kernels of one layer
    first_kernels: int  # eager extras of the first stage (embedding, its all-reduce)
    last_graphed_kernels: int  # last-stage extras inside the model's graph (final norm)
    last_eager_kernels: int  # last-stage extras never graphed (LM head, logits all-gather)

    def __post_init__(self) -> None:
        if self.mode not in GRAPH_MODES:
            raise HarnessError(f"unknown CUDA-graph mode {self.mode!r}; known: {', '.join(GRAPH_MODES)}")

    def eager_kernels(self, layers: int, first: bool, last: bool) -> int:
        """Kernels one stage launches when nothing is graphed."""
        return (layers * self.layer_kernels + first * self.first_kernels
                + last * (self.last_graphed_kernels + self.last_eager_kernels))

    def stage_s(self, seqs, tokens, layers: int, first: bool, last: bool):
        """Seconds of launches of one stage; `seqs`, `tokens` floats or arrays (0 where no tokens)."""
        seqs, tokens = np.asarray(seqs, dtype=np.float64), np.asarray(tokens, dtype=np.float64)
        kernels = np.full(seqs.shape, float(self.eager_kernels(layers, first, last)))
        if self.mode != "eager":
            full = (tokens == seqs) & (seqs <= self.graph_max_tokens)  # decode-only, captured
            kernels = np.where(full, 1.0 + last * self.last_eager_kernels, kernels)
            if self.mode == "full-and-piecewise":
                piecewise = ~full & (tokens <= self.graph_max_tokens)
                pieces = layers + 1.0 + layers * _EAGER_ATTENTION_KERNELS + last * self.last_eager_kernels
                kernels = np.where(piecewise, pieces, kernels)
        out = np.where(seqs > 0, kernels * self.launch_s, 0.0)
        return float(out) if out.ndim == 0 else out


def build(mode: str, launch_s: float, graph_max_tokens: int, *, elementwise_kernels: int, gemms: int,
          allreduces_per_layer: int, tp: int) -> LaunchModel | None:
    """The stage's launch model, or None where launches are not priced (launch_s == 0)."""
    if launch_s <= 0.0:
        return None
    ar = allreduces_per_layer if tp > 1 else 0
    layer = gemms + 1 + elementwise_kernels + ar  # GEMMs, attention, elementwise, all-reduces
    return LaunchModel(mode, launch_s, graph_max_tokens, layer_kernels=layer, first_kernels=1 + (tp > 1),
                       last_graphed_kernels=1, last_eager_kernels=1 + (tp > 1))
