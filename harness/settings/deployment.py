"""The deployment's sections of an experiment: `model`, `hardware`, `parallel` and `perf` (how the
performance model prices it). harness.backends.deployment builds the priced deployment from them."""
from __future__ import annotations

from dataclasses import dataclass

from engines.perf.kernels import DEFAULT_STACK


@dataclass(frozen=True)
class ModelSettings:
    name: str  # engines.perf catalog name (engines/perf/architectures.py)


@dataclass(frozen=True)
class HardwareSettings:
    gpu: str  # engines.perf catalog name (engines/perf/hardware.py), or cpu (engines/perf/cpu_device.py)
    gpus_per_node: int | None = None
    topology: str | None = None
    # gpu: cpu: this machine's numbers; None: measured by a short probe
    cpu_flops: float | None = None
    cpu_bandwidth: float | None = None  # B/s
    cpu_memory_bytes: int | None = None  # host memory for weights and the KV cache


@dataclass(frozen=True)
class ParallelSettings:
    tp: int = 1
    pp: int = 1
    dp: int = 1  # data-parallel ranks of tp x pp GPUs; > 1 with ep (an MoE model): vLLM's --data-parallel-size
    ep: bool = False  # expert parallelism over dp x tp GPUs: vLLM's --enable-expert-parallel


@dataclass(frozen=True)
class PerfSettings:
    kind: str = "analytical"  # analytical | profile
    path: str | None = None  # profile: a long-format CSV or a Vidur profile directory
    stack: str = DEFAULT_STACK  # the engine's kernels (engines/perf/kernels.py STACKS)
    attention_kernel: str | None = None  # another attention kernel than the stack's
    kv_memory: str | None = None  # another KV-sizing recipe than the stack's (engines/perf/memory.py)
    weight_dtype: str | None = None  # fp8: linear layers' weights in FP8 on H100/H200 (engines/perf/precision.py)
    kv_dtype: str | None = None  # fp8: the KV cache in FP8 (engines/perf/precision.py)
    cuda_graphs: bool | None = None  # false: a graph-capturing stack's kernels launched eagerly (engines/perf/launch.py)
    ep_comm: str | None = None  # an expert-parallel MoE layer's token exchange: allgather_reducescatter | all2all (engines/perf/expert_parallel.py)
    calibration: str | None = None  # a calibration file (python -m harness calibrate; engines/perf/calibration.py)
    cpu_costs: str = "engine"  # engine: the stack's; none: GPU kernels only; vllm-0.32-cpu[-plugin]: measured on a CPU host (engines/perf/cpu_costs.py CPU_CHOICES)


# The perf.* keys Deployment.create takes by the same name (the engine's kernels, KV sizing, number
# formats, CUDA graphs, EP's token exchange); the others (kind, path, calibration, cpu_costs) choose the model.
DEPLOYMENT_KNOBS = ("stack", "attention_kernel", "kv_memory", "weight_dtype", "kv_dtype", "cuda_graphs", "ep_comm")
