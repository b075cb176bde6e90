"""The GPUs serving teams run today (issue 34): GeForce RTX 4090 and L40S (Ada, AD102), RTX PRO 6000
Blackwell server and workstation editions (GB202), H100 PCIe and H20 (Hopper), B200 (Blackwell).

As in hardware.py, peaks are datasheet values and the *_efficiency fields achievable fractions from
measurements of isolated operators, never fitted to a serving result. How sure each number is
(measured on this part / on its nearest measured sibling / datasheet only) is said next to it and
tabled in engines/perf/README.md, "The GPUs of 2022-2025".

Traps the numbers avoid:
* Dense figures only: datasheets quote tensor throughput with 2:4 sparsity; every peak here is half.
* FP32 accumulate: engines accumulate FP16/BF16 GEMMs and attention in FP32. GeForce boards run
  that at half the FP16-accumulate rate printed on the box ([ADA-WP]: RTX 4090 330.3 TFLOPS with
  FP16 accumulate, 165.2 with FP32); professional and data-centre boards run both at full rate.
* Boost vs sustained clocks: datasheet peaks are at the rated boost clock. What the card sustains
  under a long GEMM (a GeForce boosts past its rating, a 350 W board throttles under it) is in the
  measured matmul fraction, which is why a fraction can be near 1.0 or far under it.
* Usable memory: `cuda_total_bytes` is what CUDA reports on a headless card (ECC carve-outs and the
  driver's reserve taken). A desktop session holds a further 0.3-0.5 GiB of a GeForce card (a
  compositor process of 470.64 MiB in [CUDA-TOTAL-ADA]'s Phidias report): it fits in the 10 %
  that `gpu_memory_utilization` 0.9 leaves, and vLLM refuses to start when free memory is under
  utilization x total, so at 0.9 the KV pool priced here is the one a desktop box gets too.

Sources:
  [ADA-WP]   NVIDIA Ada GPU Architecture whitepaper (v2.1), Appendix A, Table "GeForce RTX 4090":
             128 SMs, boost 2,520 MHz, 24 GB GDDR6X on 384 bits at 21 Gbps = 1,008 GB/s; Peak FP16
             Tensor TFLOPS with FP16 Accumulate 330.3/660.6, with FP32 Accumulate 165.2/330.4, BF16
             (FP32 accumulate) 165.2/330.4, FP8 with FP32 Accumulate 330.3/660.6 (dense/sparse; the
             660.6 some spec listings give as dense is FP8 with FP16 accumulate).
  [L40S-DS]  NVIDIA L40S datasheet: 18,176 CUDA cores (142 SMs of 128), 48 GB GDDR6 with ECC,
             864 GB/s, BF16/FP16 Tensor 362.05 | 733 TFLOPS, FP8 733 | 1,466 (dense | sparse), 350 W; full-
             rate FP32 accumulate (the measured 269 TFLOPS BF16 below is over half of 362).
  [PRO6000-DS] NVIDIA RTX PRO 6000 Blackwell Workstation Edition datasheet: GB202, 188 SMs (24,064
             CUDA cores), 96 GB GDDR7 with ECC on 512 bits at 28 Gbps = 1,792 GB/s, 125 TFLOPS FP32,
             "4,000 AI TOPS" (FP4 with sparsity: 2,000 dense, FP8 1,000, FP16/BF16 500 with FP32
             accumulate: a professional board, full rate; the measured 417 TFLOPS BF16 below could
             not happen at GeForce's half rate), PCIe Gen5 x16.
  [PRO6000-SE] NVIDIA RTX PRO 6000 Blackwell Server Edition datasheet (December 2025, p. 3) and
             product page (nvidia.com/en-us/data-center/rtx-pro-6000-blackwell-server-edition): the
             same GB202 and 96 GB GDDR7, but 1,597 GB/s (its memory clocked lower: 1,597 / 64 B =
             25 Gbps a pin), 120 TFLOPS FP32, "FP4 Tensor Core 4 PFLOPS, FP8 2 PFLOPS, FP16/BF16
             1 PFLOP" (with sparsity: 2,000 / 1,000 / 500 dense, the Workstation's; its FP32 figure
             says its rated boost clock is 4 % under the Workstation's, which the measured matmul
             fraction carries), up to 600 W, passive (server airflow).
  [H100-DS]  NVIDIA H100 Tensor Core GPU datasheet, column "H100 PCIe": BF16 1,513 TFLOPS and FP8
             3,026 with sparsity (756.5 / 1,513 dense), 80 GB HBM2e at 2 TB/s, 350 W, NVLink bridge
             600 GB/s, PCIe Gen5 128 GB/s; NVIDIA H100 Tensor Core GPU Architecture whitepaper: 114 SMs
             on H100 PCIe.
  [H20]      NVIDIA H20 (Hopper, for export markets): 96 GB HBM3 at 4.0 TB/s, 148 TFLOPS FP16/BF16
             dense, FP8 296, NVLink 900 GB/s (as quoted with its measurements in
             Dao-AILab/flash-attention#1310: "4TB/s DRAM bandwidth while only 148 TFLOPS (tensor
             core, FP16)"); 78 SMs (its Geekbench 6 device report, as the press quoted it; no NVIDIA
             datasheet in the sources).
  [B200-DS]  NVIDIA DGX B200 / HGX B200 datasheets: 8 GPUs with 1,440 GB of HBM3e (180 GB each) at
             64 TB/s (8 TB/s each), FP16/BF16 36 PFLOPS and FP8 72 with sparsity (2.25 / 4.5 PFLOPS
             dense a GPU), NVLink5 1.8 TB/s a GPU through NVSwitch, 8 x ConnectX-7 400 Gb/s; 148 SMs.
  [MAMF]     hardware.py: S. Bekman's measured matmul table, "NVIDIA B200 SXM 1745.0 / 2250 = 77.6 %".
  [TORCH-PERF] zzc0721/torch-performance-test-data issues: one script, torch.matmul on square
             1024-10240 shapes, best BF16 TFLOPS: RTX 4090 #78 164.81 (torch 2.7), L40S #43 269.15
             (2.8), RTX PRO 6000 Blackwell Server Edition #161 417.34 (2.7), Workstation Edition #160
             368.43 (2.7), H100 PCIe #95 495.93 (2.9), H20 #77 142.25 (2.7). The same script gives
             H100 SXM 797.51 / 989 = 0.806 (#79; [MAMF]: 0.803) and A40 122.29 / 149.7 = 0.817
             (#185; hardware.py assumes 0.811): where both measured, they agree within a point.
  [FA2-ADA]  FlashAttention-2 runs its sm80 kernels (mma.sync, FP32 accumulate) on Ada and
             Blackwell RTX; no serving-shape measurement of it on these parts is in the sources, so
             they take the Ampere figure of hardware.py [FA2] (0.60 of the FP32-accumulate peak; an
             RTX A5000, GA102, reaches 81.9 of 111.1 TFLOPS = 0.74 at head dim 64, gpu-mode/ring-
             attention#10, as the A100's 0.73 best case).
  [FA2-H20]  Dao-AILab/flash-attention#1310 (H20): FA2 forward, head dim 128, 2,048 tokens,
             non-causal: 83.7 TFLOPS = 0.566 of 148.
  [FA4-B200] Dao-AILab/flash-attention#2280 (B200): forward, head dim 128, 8,192 tokens, non-causal,
             1,534.8 TFLOPS = 0.682 of 2,250; with the A100's serving discount (0.60 of its 0.73
             best case, hardware.py [FA2]) 0.56. FlashAttention-4, not FA2: the kernel an engine runs
             on sm100 (FA2 has no Blackwell data-centre kernels of its own).
  [BW-ADA]   krrishnarraj/clpeak#106 (RTX 4090): global-memory read 921.3 GB/s = 0.914 of 1,008.
  [BW-GB202] Don-Chad/ninfer-3090#17 (RTX 5090, GB202 with the RTX PRO 6000's 512-bit 28 Gbps
             GDDR7): sustained read 1,674.5 of 1,792 GB/s = 0.934.
  [CUDA-TOTAL-ADA] PyTorch out-of-memory messages: RTX 4090 "total capacity of 23.64 GiB"
             (ali-vilab/VGen#104, 3DTopia/Phidias-Diffusion#8); L40S 44.42 and 44.53 GiB
             (stepfun-ai/Step-Video-T2V#8, Wan-Video/Wan2.1#205: ECC on, as shipped); RTX PRO 6000
             Blackwell "total=94.97 GiB" (antirez/ds4#431).
"""
from __future__ import annotations

from .gpu_spec import CUDA_TOTAL_80G, HBM_EFF, WEIGHT_STREAM_EFF, GiB, GpuSpec

# A streaming kernel's measured best on a GDDR part, as a serving fraction: the A100's discount
# (HBM_EFF 0.85 where a tuned read kernel reaches 0.88, hardware.py [HBM-RD]) applied to it.
_SERVING_OF_BEST_READ = HBM_EFF / 0.88
_AD102_READ = 0.914  # [BW-ADA]
_GB202_READ = 0.934  # [BW-GB202]
# FlashAttention-2's serving fraction of the FP32-accumulate peak on the mma.sync parts [FA2-ADA].
_FA2_MMA_SYNC = 0.60
# HBM parts without a CUDA total in the sources: the 80 GB parts' 0.8 GiB reserve (gpu_spec.py
# [CUDA-TOTAL]), an assumption.
_HBM_RESERVE = 80 * GiB - CUDA_TOTAL_80G


def _pro6000(edition: str, hbm_bandwidth: float, matmul_efficiency: float) -> GpuSpec:
    """One RTX PRO 6000 Blackwell edition: the same GB202 and 96 GB [PRO6000-DS], [PRO6000-SE]; the
    editions differ in memory clock (each datasheet's bandwidth), cooling and power (their measured
    matmul fractions)."""
    return GpuSpec(
        name=f"rtx-pro-6000-{edition}-96g",
        sm_count=188,  # [PRO6000-DS]
        peak_flops=500e12,  # [PRO6000-DS] 4,000 FP4 TOPS sparse -> 500 FP16/BF16 dense, FP32 accumulate
        fp8_peak_flops=1000e12,  # [PRO6000-DS] FP8 dense
        hbm_bytes=96 * GiB,  # [PRO6000-DS] 32 x 3 GB (24 Gb) GDDR7
        cuda_total_bytes=int(94.97 * GiB),  # [CUDA-TOTAL-ADA] ds4#431
        hbm_bandwidth=hbm_bandwidth,
        matmul_efficiency=matmul_efficiency,
        attention_efficiency=_FA2_MMA_SYNC,  # [FA2-ADA] sibling (Ampere) figure
        hbm_efficiency=_GB202_READ * _SERVING_OF_BEST_READ,  # [BW-GB202] sibling (RTX 5090): 0.902
        weight_stream_efficiency=WEIGHT_STREAM_EFF,  # [VIDUR-MLP] A40/A100 sibling figure
    )


RECENT_GPUS: dict[str, GpuSpec] = {
    "rtx-4090-24g": GpuSpec(
        name="rtx-4090-24g",
        sm_count=128,  # [ADA-WP]
        peak_flops=165.2e12,  # [ADA-WP] FP16/BF16 with FP32 accumulate, dense: half the 330.3 on the box
        fp8_peak_flops=330.3e12,  # [ADA-WP] FP8 with FP32 accumulate, dense
        hbm_bytes=24 * GiB,  # [ADA-WP] 12 x 16 Gb GDDR6X
        cuda_total_bytes=int(23.64 * GiB),  # [CUDA-TOTAL-ADA] headless; a desktop holds 0.3-0.5 GiB more
        hbm_bandwidth=1008e9,  # [ADA-WP]
        matmul_efficiency=164.81 / 165.2,  # [TORCH-PERF] #78, measured on this part: 0.998 (boosts past 2,520 MHz)
        attention_efficiency=_FA2_MMA_SYNC,  # [FA2-ADA] sibling (Ampere) figure
        hbm_efficiency=_AD102_READ * _SERVING_OF_BEST_READ,  # [BW-ADA] measured best read -> 0.883
        weight_stream_efficiency=WEIGHT_STREAM_EFF,  # [VIDUR-MLP] sibling figure
    ),
    "l40s-48g": GpuSpec(
        name="l40s-48g",
        sm_count=142,  # [L40S-DS]
        peak_flops=362.05e12,  # [L40S-DS] dense; a data-centre board: full-rate FP32 accumulate
        fp8_peak_flops=733e12,  # [L40S-DS] dense
        hbm_bytes=48 * GiB,  # [L40S-DS] 48 GB GDDR6
        cuda_total_bytes=int(44.42 * GiB),  # [CUDA-TOTAL-ADA] ECC on (1/16 of GDDR6 carved, as the A40's 45 GiB)
        hbm_bandwidth=864e9,  # [L40S-DS]
        matmul_efficiency=269.15 / 362.05,  # [TORCH-PERF] #43, measured on this part: 0.743 (350 W cap)
        attention_efficiency=_FA2_MMA_SYNC,  # [FA2-ADA] sibling (Ampere) figure
        hbm_efficiency=_AD102_READ * _SERVING_OF_BEST_READ,  # [BW-ADA] sibling (RTX 4090, AD102): 0.883
        weight_stream_efficiency=WEIGHT_STREAM_EFF,
    ),
    # bandwidth: [PRO6000-SE] 1,597 GB/s, [PRO6000-DS] 1,792 GB/s; matmul: [TORCH-PERF] #161 0.835, #160 0.737
    "rtx-pro-6000-server-96g": _pro6000("server", 1597e9, 417.34 / 500),
    "rtx-pro-6000-ws-96g": _pro6000("ws", 1792e9, 368.43 / 500),
    "h100-80g-pcie": GpuSpec(
        name="h100-80g-pcie",
        sm_count=114,  # [H100-DS] whitepaper
        peak_flops=1513e12 / 2,  # [H100-DS] BF16 1,513 with sparsity -> 756.5 dense
        fp8_peak_flops=1513e12,  # [H100-DS] FP8 3,026 with sparsity -> 1,513 dense
        hbm_bytes=80 * GiB,  # [H100-DS] 80 GB HBM2e
        cuda_total_bytes=CUDA_TOTAL_80G,  # gpu_spec.py [CUDA-TOTAL]
        hbm_bandwidth=2.0e12,  # [H100-DS] 2 TB/s
        matmul_efficiency=495.93 / 756.5,  # [TORCH-PERF] #95, measured on this part: 0.656 (350 W cap)
        attention_efficiency=0.34,  # hardware.py [FA2] H100 SXM figure (sibling: the same GH100 kernels)
        hbm_efficiency=HBM_EFF,  # hardware.py [HBM-RD] A100 HBM2e sibling
        weight_stream_efficiency=WEIGHT_STREAM_EFF,
    ),
    "h20-96g": GpuSpec(
        name="h20-96g",
        sm_count=78,  # [H20] Geekbench 6 report (medium confidence)
        peak_flops=148e12,  # [H20] dense
        fp8_peak_flops=296e12,  # [H20] dense
        hbm_bytes=96 * GiB,  # [H20] 96 GB HBM3
        cuda_total_bytes=96 * GiB - _HBM_RESERVE,  # assumption: the 80 GB parts' reserve
        hbm_bandwidth=4.0e12,  # [H20]
        matmul_efficiency=142.25 / 148,  # [TORCH-PERF] #77, measured on this part: 0.961
        attention_efficiency=83.7 / 148,  # [FA2-H20], measured on this part: 0.566
        hbm_efficiency=HBM_EFF,  # hardware.py [HBM-RD] sibling
        weight_stream_efficiency=WEIGHT_STREAM_EFF,
    ),
    "b200-180g": GpuSpec(
        name="b200-180g",
        sm_count=148,  # [B200-DS]
        peak_flops=2.25e15,  # [B200-DS] dense FP16/BF16 a GPU ([MAMF]'s "theory" 2250)
        fp8_peak_flops=4.5e15,  # [B200-DS] dense FP8 a GPU
        hbm_bytes=180 * GiB,  # [B200-DS] 180 GB HBM3e usable (192 GiB physical, 1/16 held back: [MAMF] notes)
        cuda_total_bytes=180 * GiB - _HBM_RESERVE,  # assumption: the 80 GB parts' reserve
        hbm_bandwidth=8.0e12,  # [B200-DS]
        matmul_efficiency=1745.0 / 2250,  # [MAMF], measured on this part: 0.776
        attention_efficiency=0.56,  # [FA4-B200], measured on this part (FA4), serving discount applied
        hbm_efficiency=HBM_EFF,  # hardware.py [HBM-RD] sibling
        weight_stream_efficiency=WEIGHT_STREAM_EFF,
    ),
}

# Decode on the Ada and Blackwell RTX parts (issue 50 item 4): where their weight-streaming GEMMs and vLLM's
# paged decode attention come from. Measured on the L40S (AD102) and the RTX PRO 6000 Server (GB202) in
# NVIDIA AIConfigurator's operator profiles (kernels.py [AIC-DECODE], [AIC-GEMM]); the RTX 4090 and the
# Workstation Edition take their chip sibling's (no profile of them was found). Under `ideal` every part
# keeps the datasheet fractions (weights at 0.73, KV at hbm_efficiency above), and under `sarathi-serve-2024`
# decode attention stays the A100's split-KV fit (Sarathi-Serve's own decode call).
DECODE_SOURCES: dict[str, dict[str, str]] = {
    "l40s-48g": {"weight_stream": "measured: 0.819 [AIC-GEMM] (vLLM 0.22's bf16 GEMMs on an L40S)",
                 "decode_attention": "measured: vLLM 0.24's FA2 on an L40S [AIC-DECODE]"},
    "rtx-pro-6000-server-96g": {"weight_stream": "measured: 0.939 [AIC-GEMM] (SGLang 0.5.10's bf16 GEMMs)",
                                "decode_attention": "measured: vLLM 0.24's FA2 on this part [AIC-DECODE]"},
    "rtx-4090-24g": {"weight_stream": "sibling: the L40S's 0.819 (AD102)",
                     "decode_attention": "sibling: the L40S's (AD102), times as measured, KV at 0.853 of its own bandwidth"},
    "rtx-pro-6000-ws-96g": {"weight_stream": "sibling: the Server Edition's 0.939 (GB202)",
                            "decode_attention": "sibling: the Server Edition's (GB202), KV at 0.947 of its own bandwidth"},
}

RECENT_ALIASES = {
    "rtx-4090": "rtx-4090-24g", "rtx4090": "rtx-4090-24g", "4090": "rtx-4090-24g",
    "geforce-rtx-4090": "rtx-4090-24g", "nvidia-geforce-rtx-4090": "rtx-4090-24g",
    "l40s": "l40s-48g", "nvidia-l40s": "l40s-48g",
    "rtx-pro-6000-server": "rtx-pro-6000-server-96g",
    "rtx-pro-6000-blackwell-server-edition": "rtx-pro-6000-server-96g",
    "rtx-pro-6000-ws": "rtx-pro-6000-ws-96g", "rtx-pro-6000-workstation": "rtx-pro-6000-ws-96g",
    "rtx-pro-6000-blackwell-workstation-edition": "rtx-pro-6000-ws-96g",
    "h100-pcie": "h100-80g-pcie", "nvidia-h100-pcie": "h100-80g-pcie",
    "h20": "h20-96g", "nvidia-h20": "h20-96g",
    "b200": "b200-180g", "b200-sxm": "b200-180g", "nvidia-b200": "b200-180g",
}

# Names that fit two editions: refused with the choices, never guessed (their measured matmul
# fractions differ by 13 %).
RECENT_AMBIGUOUS = {
    name: ("rtx-pro-6000-server-96g (Server Edition; preset hardware=rtx_pro_6000_server)",
           "rtx-pro-6000-ws-96g (Workstation Edition; preset hardware=rtx_pro_6000_ws)")
    for name in ("rtx-pro-6000", "rtx-pro-6000-96g", "rtx-pro-6000-blackwell", "nvidia-rtx-pro-6000-blackwell")
}
