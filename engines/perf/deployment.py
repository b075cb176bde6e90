"""A deployment: one model on tp x pp GPUs of one kind, with the links its collectives use,
and the software overheads of the serving engine around the GPU work.

Engine overheads (defaults below) come from the public CPU-overhead profiles of the Vidur
simulator (microsoft/vidur, data/profiling/a100/cpu_overheads.csv), measured on a vLLM-based
engine of the Sarathi-Serve era on the paper's A100s. Medians for Llama-2-7B, TP1:

    batch   schedule  sampler_e2e  prepare_inputs_e2e  process_model_outputs   sum (ms)
      8      0.165      0.888          0.293               0.624               1.97
     32      0.580      1.126          0.671               2.246               4.62
     64      0.952      1.370          1.163               4.108               7.59

A straight line through them is 1.2 ms + 0.10 ms per sequence. The same file reports
RAY_COMM_TIME_MEDIAN, the driver-to-worker round trip that only multi-GPU deployments pay
(0.16-0.45 ms at TP1, i.e. nothing to speak of). It grows with the batch (the inputs and
outputs it carries); medians for Llama-2-70B, TP4, the shape of the paper's PP stages:

    batch       8     16     24     32     40     48     56     64
    ray (ms)  3.05   3.76   4.39   5.40   6.44   7.86   8.50   8.49

A least-squares line through them is 2.05 ms + 0.109 ms per sequence (Llama-2-7B TP4:
2.3 + 0.098; TP2: 2.0 + 0.067) -> 2.0 ms + 0.10 ms per sequence. (The vLLM v0.6.0
performance blog, Sep 2024, makes the same point qualitatively: on Llama-3-8B/H100, scheduling
alone was 29 % of the step time in v0.5.3.) All four are plain fields: a what-if for a leaner
engine sets them lower.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from common.errors import HarnessError

from .architectures import ModelArch, get_model
from .hardware import GpuSpec, LinkSpec, Topology, get_gpu, get_topology
from .kernels import DEFAULT_STACK, get_attention_kernel, get_stack
from .memory import check_recipe
from .precision import bytes_per_element, check_dtype

CPU_OVERHEAD_S = 1.2e-3  # per iteration, fixed part (Vidur profile, see module docstring)
CPU_OVERHEAD_PER_SEQ_S = 0.10e-3  # per sequence in the batch (Vidur profile)
MULTI_GPU_OVERHEAD_S = 2.0e-3  # per iteration when tp * pp > 1 (Vidur RAY_COMM_TIME_MEDIAN, fixed part)
MULTI_GPU_OVERHEAD_PER_SEQ_S = 0.10e-3  # per sequence when tp * pp > 1 (same profile, slope)

# The defaults above were measured on the A100 servers. The A40 server has its own host CPU and
# its own profile (Vidur data/profiling/a40/cpu_overheads.csv, Llama-2-70B TP4 medians, ms):
#
#    batch   schedule + sampler_e2e + prepare_inputs_e2e + process_model_outputs   ray_comm
#      8        0.27   +   1.68    +   0.47             +   1.00  =  3.43          3.92
#     32        0.89   +   2.05    +   1.05             +   3.16  =  7.14          6.56
#     64        1.24   +   2.09    +   1.82             +   5.74  = 10.89          9.31
#
# Least-squares lines: 2.6 ms + 0.13 ms per sequence, and 3.3 ms + 0.096 ms per sequence.
# Keyed by topology name (a server's host goes with its GPUs); explicit overrides win.
HOST_OVERHEADS: dict[str, dict[str, float]] = {
    "paper-a40": dict(cpu_overhead_s=2.6e-3, cpu_overhead_per_seq_s=0.13e-3,
                      multi_gpu_overhead_s=3.3e-3, multi_gpu_overhead_per_seq_s=0.096e-3),
}

# GEMM thread-block tile along the token dimension. cuBLAS/CUTLASS Ampere and Hopper kernels use
# 128- or 256-row CTA tiles; NVIDIA's "Matrix Multiplication Background User's Guide" (Deep
# Learning Performance docs, section "Tile Quantization") shows the step a tile boundary causes.
# 128 is the smaller of the common sizes, so it under- rather than over-states the effect.
GEMM_TILE_TOKENS = 128

# Tokens of the dummy forward pass whose activations vLLM reserves before sizing the KV cache
# (its profile run uses max_num_batched_tokens; 4096 covers the paper's token budgets).
ACTIVATION_TOKENS = 4096


@dataclass(frozen=True)
class Deployment:
    model: ModelArch
    gpu: GpuSpec
    tp: int = 1
    pp: int = 1
    tp_link: LinkSpec | None = None  # slowest hop of the TP ring (None when tp == 1)
    pp_link: LinkSpec | None = None  # slowest stage-to-stage path (None when pp == 1)
    cpu_overhead_s: float = CPU_OVERHEAD_S
    cpu_overhead_per_seq_s: float = CPU_OVERHEAD_PER_SEQ_S
    multi_gpu_overhead_s: float = MULTI_GPU_OVERHEAD_S
    multi_gpu_overhead_per_seq_s: float = MULTI_GPU_OVERHEAD_PER_SEQ_S
    gemm_tile_tokens: int = GEMM_TILE_TOKENS
    activation_tokens: int = ACTIVATION_TOKENS
    stack: str = DEFAULT_STACK  # the engine's kernels (kernels.py STACKS)
    attention_kernel: str | None = None  # another attention kernel than the stack's (kernels.py)
    kv_memory: str | None = None  # another KV-sizing recipe than the stack's (memory.py)
    weight_dtype: str | None = None  # "fp8": linear layers' weights in FP8 (precision.py); None: the model's 16-bit
    kv_dtype: str | None = None  # "fp8": the KV cache in FP8 (precision.py); None: 16-bit
    topology: str | None = field(default=None, compare=False)  # for descriptions only

    def __post_init__(self) -> None:
        if self.tp < 1 or self.pp < 1:
            raise HarnessError(f"deployment: tp and pp must be >= 1, got tp={self.tp} pp={self.pp}")
        self.model.check_tp(self.tp)
        self.model.layers_per_stage(self.pp)
        if self.tp > 1 and self.tp_link is None:
            raise HarnessError("deployment: tp > 1 needs a tp_link")
        if self.pp > 1 and self.pp_link is None:
            raise HarnessError("deployment: pp > 1 needs a pp_link")
        object.__setattr__(self, "stack", get_stack(self.stack).name)  # one spelling; unknown names refused
        if self.attention_kernel is not None:
            object.__setattr__(self, "attention_kernel", get_attention_kernel(self.attention_kernel).name)
        if self.kv_memory is not None:
            object.__setattr__(self, "kv_memory", check_recipe(self.kv_memory))
        object.__setattr__(self, "weight_dtype", check_dtype(self.weight_dtype, "weight_dtype", self.gpu))
        object.__setattr__(self, "kv_dtype", check_dtype(self.kv_dtype, "kv_dtype", self.gpu))
        if self.gemm_tile_tokens < 1:
            raise HarnessError("deployment: gemm_tile_tokens must be >= 1")
        for name in ("cpu_overhead_s", "cpu_overhead_per_seq_s", "multi_gpu_overhead_s",
                     "multi_gpu_overhead_per_seq_s"):
            if getattr(self, name) < 0:
                raise HarnessError(f"deployment: {name} must be >= 0")

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp

    @property
    def weight_bytes_per_param(self) -> int:
        """Bytes of one linear-layer weight (embeddings, norms and an MoE router stay 16-bit)."""
        return bytes_per_element(self.weight_dtype, self.model.bytes_per_param)

    @property
    def kv_bytes_per_element(self) -> int:
        return bytes_per_element(self.kv_dtype, self.model.bytes_per_param)

    def describe(self) -> str:
        where = f", {self.topology}" if self.topology else ""
        links = []
        if self.tp_link:
            links.append(f"TP over {self.tp_link.name}")
        if self.pp_link:
            links.append(f"PP over {self.pp_link.name}")
        extra = f" ({'; '.join(links)})" if links else ""
        kernels = f", stack {self.stack}" + (f", attention {self.attention_kernel}" if self.attention_kernel else "")
        kernels += "".join(f", {what} {dtype}" for what, dtype in (("weights", self.weight_dtype),
                                                                   ("KV", self.kv_dtype)) if dtype)
        return f"{self.model.name} on {self.num_gpus}x {self.gpu.name} tp={self.tp} pp={self.pp}{where}{extra}{kernels}"

    def with_changes(self, **changes: Any) -> Deployment:
        return replace(self, **changes)

    @classmethod
    def create(
        cls,
        model: str | ModelArch = "yi-34b",
        gpu: str | GpuSpec = "a100-80g-sxm",
        tp: int = 1,
        pp: int = 1,
        topology: str | Topology | None = None,
        gpus_per_node: int | None = None,
        **overrides: Any,
    ) -> Deployment:
        """Place tp x pp GPUs on nodes of `topology` (default: the GPU's usual node) and pick links.

        GPUs are filled node by node, one pipeline stage after the other, each stage's TP group
        contiguous. The TP link is the slowest hop of that ring (NVLink inside a pair/NVSwitch
        domain, PCIe across pairs, the inter-node link when the group spans nodes); the PP link is
        the slowest stage-to-stage path (the inter-node link when stages sit on different nodes).
        """
        arch = get_model(model)
        spec = get_gpu(gpu)
        tp, pp = int(tp), int(pp)
        if tp < 1 or pp < 1:
            raise HarnessError(f"deployment: tp and pp must be >= 1, got tp={tp} pp={pp}")
        topo = get_topology(topology, spec, gpus_per_node)
        tp_link = None
        if tp > 1:
            rings = [topo.ring_link(s * tp, tp) for s in range(pp)]
            tp_link = min(rings, key=lambda link: (link.effective_bandwidth, -link.latency_s))
        pp_link = None
        if pp > 1:
            paths = [topo.link_between(s * tp, (s + 1) * tp) for s in range(pp - 1)]
            pp_link = min(paths, key=lambda link: (link.effective_bandwidth, -link.latency_s))
        fields = dict(model=arch, gpu=spec, tp=tp, pp=pp, tp_link=tp_link, pp_link=pp_link,
                      topology=f"{topo.name}/{topo.gpus_per_node}-per-node")
        fields.update(HOST_OVERHEADS.get(topo.name, {}))
        fields.update(overrides)
        return cls(**fields)
