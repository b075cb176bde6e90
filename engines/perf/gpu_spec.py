"""`GpuSpec`: one accelerator's datasheet peaks and achievable fractions, and the fractions the
catalogs share (hardware.py: the paper-era parts; recent_gpus.py: Ada, Hopper PCIe/H20, Blackwell).
Abbreviations as in hardware.py."""
from __future__ import annotations

from dataclasses import dataclass

GiB = 1024**3


@dataclass(frozen=True)
class GpuSpec:
    """One accelerator. Peaks are datasheet values; *_efficiency are achievable fractions."""

    name: str
    peak_flops: float  # dense BF16/FP16 tensor-core FLOP/s (no 2:4 sparsity)
    hbm_bytes: int  # device memory visible to CUDA
    hbm_bandwidth: float  # device-memory bandwidth, B/s
    matmul_efficiency: float  # achievable fraction of peak_flops for large GEMMs
    attention_efficiency: float  # achievable fraction of peak_flops for prefill attention kernels
    hbm_efficiency: float  # achievable fraction of hbm_bandwidth for streaming kernels
    sm_count: int  # streaming multiprocessors [SMS]: how many thread blocks run at once (split_kv.py)
    # achievable fraction of hbm_bandwidth while a GEMM streams its weights for a few rows (decode)
    weight_stream_efficiency: float = 0.73
    # the device total CUDA reports (torch.cuda.get_device_properties().total_memory), where it is
    # less than hbm_bytes: what an engine sizing its KV cache starts from (memory.py). None: hbm_bytes.
    cuda_total_bytes: int | None = None
    # dense FP8 (E4M3) tensor-core FLOP/s where the GPU has FP8 tensor cores (Hopper on); None: no FP8
    fp8_peak_flops: float | None = None

    @property
    def visible_bytes(self) -> int:
        return self.hbm_bytes if self.cuda_total_bytes is None else self.cuda_total_bytes

    @property
    def matmul_flops(self) -> float:
        return self.peak_flops * self.matmul_efficiency

    @property
    def attention_flops(self) -> float:
        return self.peak_flops * self.attention_efficiency

    @property
    def mem_bandwidth(self) -> float:
        return self.hbm_bandwidth * self.hbm_efficiency

    @property
    def weight_bandwidth(self) -> float:
        return self.hbm_bandwidth * self.weight_stream_efficiency


# HBM fraction used for streaming kernels (KV reads in attention, elementwise ops): 0.85, a
# little under the 88-90 % best case of [HBM-RD], because serving kernels are not hand-tuned
# copy kernels. GEMMs streaming their weights at decode batch sizes reach less: 0.73, measured
# on A40 and A100 [VIDUR-MLP]; H100/H200 have no such profile here and assume the same fraction.
HBM_EFF = 0.85
# [CUDA-TOTAL] An 80 GB card shows CUDA 79.1-79.25 GiB (the rest is the driver's and the ECC's):
# PyTorch's out-of-memory messages report "79.25 GiB total capacity" and "79.14 GiB" on A100 80GB
# (levihsu/OOTDiffusion#235, lianqi1008/Control-GIC#6), vLLM's logs 79.22 GiB on H100 80GB
# (vllm-project/vllm PRs #10511, #12126). 79.2 GiB for each 80 GB part.
CUDA_TOTAL_80G = int(79.2 * GiB)
WEIGHT_STREAM_EFF = 0.73
