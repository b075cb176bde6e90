"""A deployment: one model on tp x pp GPUs of one kind, with the links its collectives use,
and the software overheads of the serving engine around the GPU work. With data parallelism
(`dp` > 1, an MoE model with `ep`: vLLM's --data-parallel-size N --enable-expert-parallel) it
describes one of dp ranks of tp GPUs; the experts are spread over all dp x tp GPUs
(expert_parallel.py).

The engine's CPU costs (scheduling, input preparation, sampling, output processing, the
driver-to-worker hop) belong to its stack (kernels.py `EngineStack.cpu`, cpu_costs.py: Vidur's
profiles, per host); the four fields below are None until resolved from the stack and the
host, or an explicit value that wins: a what-if for a leaner engine sets them lower.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from common.errors import HarnessError

from .architectures import ModelArch, get_model
from .hardware import GpuSpec, Topology, get_gpu, get_topology
from .links import LinkSpec
from .cpu_costs import CPU_FIELDS, CPU_PROFILES, HOST_OVERHEADS, cpu_costs  # noqa: F401 (HOST_OVERHEADS re-exported)
from .kernels import DEFAULT_STACK, get_attention_kernel, get_stack
from .memory import check_recipe
from .precision import bytes_per_element, check_dtype

# The default stack's CPU costs on the paper's A100 servers, and the per-host ones (cpu_costs.py).
_DEFAULT_CPU = CPU_PROFILES["vidur-2024"]
CPU_OVERHEAD_S = _DEFAULT_CPU.cpu_overhead_s
CPU_OVERHEAD_PER_SEQ_S = _DEFAULT_CPU.cpu_overhead_per_seq_s
MULTI_GPU_OVERHEAD_S = _DEFAULT_CPU.multi_gpu_overhead_s
MULTI_GPU_OVERHEAD_PER_SEQ_S = _DEFAULT_CPU.multi_gpu_overhead_per_seq_s

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
    # None: the stack's CPU costs on `host` (cpu_costs.py); a number wins
    cpu_overhead_s: float | None = None
    cpu_overhead_per_seq_s: float | None = None
    multi_gpu_overhead_s: float | None = None
    multi_gpu_overhead_per_seq_s: float | None = None
    gemm_tile_tokens: int = GEMM_TILE_TOKENS
    activation_tokens: int = ACTIVATION_TOKENS
    stack: str = DEFAULT_STACK  # the engine's kernels (kernels.py STACKS)
    attention_kernel: str | None = None  # another attention kernel than the stack's (kernels.py)
    kv_memory: str | None = None  # another KV-sizing recipe than the stack's (memory.py)
    weight_dtype: str | None = None  # "fp8": linear layers' weights in FP8 (precision.py); None: the model's 16-bit
    kv_dtype: str | None = None  # "fp8": the KV cache in FP8 (precision.py); None: 16-bit
    cuda_graphs: bool | None = None  # False: the stack's kernels launched eagerly (launch.py); None: the stack's
    dp: int = 1  # data-parallel ranks, each one engine of tp x pp GPUs (>1 needs `ep`: expert_parallel.py)
    ep: bool = False  # expert parallelism: whole experts spread over dp x tp GPUs, tokens moved to them
    ep_link: LinkSpec | None = None  # slowest hop of a ring over the dp x tp GPUs (None for one GPU)
    ep_comm: str = "allgather_reducescatter"  # how tokens reach the experts (expert_parallel.EP_COMMS)
    host: str | None = field(default=None, compare=False)  # the topology whose host CPU the stack's CPU costs are taken on (cpu_costs.py)
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
        self._check_expert_parallel()
        stack = get_stack(self.stack)
        object.__setattr__(self, "stack", stack.name)  # one spelling; unknown names refused
        for name, value in cpu_costs(stack.cpu, self.host).items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)
        if self.attention_kernel is not None:
            object.__setattr__(self, "attention_kernel", get_attention_kernel(self.attention_kernel).name)
        if self.kv_memory is not None:
            object.__setattr__(self, "kv_memory", check_recipe(self.kv_memory))
        object.__setattr__(self, "weight_dtype", check_dtype(self.weight_dtype, "weight_dtype", self.gpu))
        object.__setattr__(self, "kv_dtype", check_dtype(self.kv_dtype, "kv_dtype", self.gpu))
        if self.gemm_tile_tokens < 1:
            raise HarnessError("deployment: gemm_tile_tokens must be >= 1")
        for name in CPU_FIELDS:
            if getattr(self, name) < 0:
                raise HarnessError(f"deployment: {name} must be >= 0")

    def _check_expert_parallel(self) -> None:
        """The DP x EP layouts vLLM runs and this model prices; anything else one line."""
        m = self.model
        if self.dp < 1:
            raise HarnessError(f"deployment: dp must be >= 1, got dp={self.dp}")
        if self.ep and not m.is_moe:
            raise HarnessError(f"deployment: ep (expert parallelism) needs an MoE model; {m.name} is dense")
        if self.dp > 1 and not self.ep:
            raise HarnessError(f"deployment: dp={self.dp} couples ranks through the MoE layers with ep=true only; "
                               "independent replicas are cluster.instances=N")
        if self.ep and self.pp > 1:
            raise HarnessError(f"deployment: ep with pp={self.pp} is not modelled (dp x tp, pp=1)")
        if self.ep and m.num_experts % self.expert_shards:
            raise HarnessError(f"deployment: ep over dp x tp = {self.expert_shards} GPUs must divide "
                               f"{m.name}'s {m.num_experts} experts")
        if self.ep and self.expert_shards > 1 and self.ep_link is None:
            raise HarnessError("deployment: ep over more than one GPU needs an ep_link")
        if self.ep_comm not in ("allgather_reducescatter", "all2all"):
            raise HarnessError(f"deployment: ep_comm must be allgather_reducescatter or all2all, got {self.ep_comm!r}")

    @property
    def num_gpus(self) -> int:
        """GPUs of one engine (one DP rank)."""
        return self.tp * self.pp

    @property
    def expert_shards(self) -> int | None:
        """GPUs the experts are spread over under EP (dp x tp); None: the tp slices of every expert."""
        return self.tp * self.dp if self.ep else None

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
        if self.ep_link:
            extra += f" (EP over {self.ep_link.name})"
        ranks = f" dp={self.dp} ep" if self.ep else ""
        gpus = self.num_gpus * self.dp
        return f"{self.model.name} on {gpus}x {self.gpu.name} tp={self.tp} pp={self.pp}{ranks}{where}{extra}{kernels}"

    def with_changes(self, **changes: Any) -> Deployment:
        """A copy with `changes`; a new stack or host brings its own CPU costs where this one had
        its old stack's (an explicit value stays)."""
        if "stack" in changes or "host" in changes:
            for name, value in cpu_costs(get_stack(self.stack).cpu, self.host).items():
                if name not in changes and getattr(self, name) == value:
                    changes[name] = None
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
        dp: int = 1,
        ep: bool = False,
        **overrides: Any,
    ) -> Deployment:
        """Place tp x pp GPUs on nodes of `topology` (default: the GPU's usual node) and pick links.

        GPUs are filled node by node, one pipeline stage after the other, each stage's TP group
        contiguous. The TP link is the slowest hop of that ring (NVLink inside a pair/NVSwitch
        domain, PCIe across pairs, the inter-node link when the group spans nodes); the PP link is
        the slowest stage-to-stage path (the inter-node link when stages sit on different nodes).
        DP ranks (`dp`, with `ep`) sit side by side, rank r on GPUs r tp .. (r+1) tp - 1 of one node
        (vLLM's all-to-all and DP padding are priced inside a node only); the EP link is the slowest
        hop of a ring over all dp x tp of them.
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
        dp = int(dp)
        if ep and dp * tp * pp > topo.gpus_per_node:
            raise HarnessError(f"deployment: dp x tp x pp = {dp * tp * pp} GPUs with ep: more than a "
                               f"{topo.name} node's {topo.gpus_per_node} (EP across nodes is not modelled)")
        ep_link = topo.ring_link(0, dp * tp) if ep else None
        fields = dict(model=arch, gpu=spec, tp=tp, pp=pp, tp_link=tp_link, pp_link=pp_link, dp=dp, ep=bool(ep), ep_link=ep_link,
                      topology=f"{topo.name}/{topo.gpus_per_node}-per-node", host=topo.name)
        fields.update(overrides)
        return cls(**fields)
