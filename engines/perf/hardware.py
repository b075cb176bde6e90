"""Hardware catalog: GPUs and node topologies, each constant with its public source (links: links.py).

Two kinds of numbers live here:

* datasheet peaks (FLOP/s, bytes, bytes/s) — quoted from the vendor's datasheet named next to them;
* achievable fractions of those peaks — taken from published measurements (named next to them).
  They are properties of the hardware + kernel libraries, measured on isolated operators; none of
  them is fitted to serving or capacity results.

Abbreviations used in the source comments:
  [A100-DS]  NVIDIA A100 Tensor Core GPU datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf),
             columns "A100 80GB SXM" and "A100 80GB PCIe".
  [A40-DS]   NVIDIA A40 datasheet (nvidia-a40-datasheet.pdf, 2021).
  [A6000-DS] NVIDIA RTX A6000 datasheet (proviz-print-nvidia-rtx-a6000-datasheet-us-nvidia-1454980-r9-web.pdf):
             48 GB GDDR6 with ECC, 768 GB/s, 10,752 CUDA cores (84 SMs of 128), 336 Tensor Cores,
             "Tensor Performance 309.7 TFLOPS" (with sparsity). [GA102-WP] NVIDIA Ampere GA102 GPU
             Architecture whitepaper (2021), Table "RTX A6000": boost clock 1,800 MHz, peak FP16 Tensor
             TFLOPS with FP32 accumulate 154.8 / 309.7 (dense / sparse), the same rate as with FP16
             accumulate (a professional board: no half-rate FP32 accumulate). Same GA102 die as the A40
             (whose boost clock is 1,740 MHz: 149.7 x 1800 / 1740 = 154.9).
  [H100-DS]  NVIDIA H100 Tensor Core GPU datasheet, column "H100 SXM" (FP8 Tensor Core 3,958 TFLOPS
             with sparsity: 1,979 dense; A100 and A40 list TF32/BF16/FP16/INT8/INT4 only, no FP8).
  [H200-DS]  NVIDIA H200 Tensor Core GPU datasheet, column "H200 SXM" (FP8 Tensor Core 3,958 TFLOPS
             with sparsity: 1,979 dense).
  [SMS]      Streaming multiprocessors: NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020):
             "108 SMs" on A100 (SXM and PCIe); [A40-DS] 10,752 CUDA cores = 84 GA102 SMs of 128;
             NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022): "132 SMs" on H100 SXM5,
             the GH100 configuration H200 SXM keeps.
  [MAMF]     S. Bekman, "Machine Learning Engineering", compute/accelerator/README.md, table
             "Maximum Achievable Matmul FLOPS comparison table" (BF16, measured with mamf-finder.py):
             A100 SXM 271.2/312 = 86.9 %, A100 PCIe 252.9/312 = 81.1 %, H100 SXM 794.5/989 = 80.3 %.
  [FA2]      T. Dao, "FlashAttention-2: Faster Attention with Better Parallelism and Work
             Partitioning" (2023), Sec. 4.1: forward pass up to 73 % of peak on A100 (230 TFLOP/s);
             "up to 335 TFLOPs/s" on H100 without Hopper-specific instructions.
  [HBM-RD]   NVIDIA developer forum "Trouble to reach peak bandwidth of A100" (2025): a tuned read
             kernel reaches 1.80 of 2.04 TB/s (88 %), and the best kernels in the GTC'25 talk cited
             there reach about 90 %.
  [VIDUR]    Public operator profiles of the Vidur simulator (microsoft/vidur, same research group
             as Sarathi-Serve, collected on the paper's clusters):
             data/profiling/network/a100_pairwise_nvlink/{all_reduce,send_recv}.csv and
             data/profiling/a40/all_reduce.csv, data/device_configs/a40.yml.
  [VIDUR-MLP] The same repository's linear-layer profiles of Llama-2-70B at TP4, 32 tokens (a
             decode batch: the GEMMs stream their weights), median ms per layer:
             data/profiling/compute/{a40,a100}/meta-llama/Llama-2-70b-hf/mlp.csv
                              attn_pre_proj  attn_post_proj  mlp_up_proj  mlp_down_proj   sum
               weight bytes      41.9 MB        33.5 MB        234.9 MB     117.4 MB    427.7 MB
               A40               0.087          0.069          0.456        0.226       0.838 ms
               A100 ("a100")     0.035          0.028          0.159        0.079       0.301 ms
             -> 510 GB/s = 0.733 of the A40's 696 GB/s; 1,421 GB/s = 0.734 of the A100 PCIe's
             1,935 GB/s (Vidur's "a100" has 4 GPUs a node with pairwise NVLink: the paper's Azure
             NC A100 v4 PCIe servers). Both give 0.73.
"""
from __future__ import annotations

from dataclasses import dataclass

from common.errors import HarnessError

from .gpu_spec import GiB, GpuSpec
from .gpu_spec import CUDA_TOTAL_80G as _CUDA_TOTAL_80G  # the shared fractions (gpu_spec.py)
from .gpu_spec import HBM_EFF as _HBM_EFF
from .gpu_spec import WEIGHT_STREAM_EFF as _WEIGHT_STREAM_EFF
from .links import _LINKS, LinkSpec, _norm
from .recent_gpus import RECENT_ALIASES, RECENT_AMBIGUOUS, RECENT_GPUS

_GPUS: dict[str, GpuSpec] = {
    "a100-80g-sxm": GpuSpec(
        name="a100-80g-sxm",
        sm_count=108,  # [SMS]
        peak_flops=312e12,  # [A100-DS] BF16 Tensor Core 312 TFLOPS (624 with sparsity)
        hbm_bytes=80 * GiB,  # [A100-DS] 80GB HBM2e (5 stacks x 16 GiB)
        cuda_total_bytes=_CUDA_TOTAL_80G,
        hbm_bandwidth=2039e9,  # [A100-DS] 2,039 GB/s
        matmul_efficiency=0.869,  # [MAMF] A100 SXM 271.2 / 312
        attention_efficiency=0.60,  # [FA2] up to 0.73 at head_dim 128, long sequences; 0.60 for
        # the chunk sizes and head dims of serving (FA2 Fig. 4: lower at short seqlen / hdim 64)
        hbm_efficiency=_HBM_EFF,
        weight_stream_efficiency=_WEIGHT_STREAM_EFF,
    ),
    "a100-80g-pcie": GpuSpec(
        name="a100-80g-pcie",
        sm_count=108,  # [SMS]
        peak_flops=312e12,  # [A100-DS] BF16 Tensor Core 312 TFLOPS
        hbm_bytes=80 * GiB,  # [A100-DS] 80GB HBM2e
        cuda_total_bytes=_CUDA_TOTAL_80G,
        hbm_bandwidth=1935e9,  # [A100-DS] 1,935 GB/s
        matmul_efficiency=0.811,  # [MAMF] A100 PCIe 252.9 / 312 (300 W power cap)
        attention_efficiency=0.60,  # [FA2], as for the SXM part
        hbm_efficiency=_HBM_EFF,
        weight_stream_efficiency=_WEIGHT_STREAM_EFF,
    ),
    "a40-48g": GpuSpec(
        name="a40-48g",
        sm_count=84,  # [SMS]
        peak_flops=149.7e12,  # [A40-DS] Peak BF16/FP16 Tensor TFLOPS with FP32 accumulate 149.7 (299.4 sparse)
        hbm_bytes=45 * GiB,  # [A40-DS] 48 GB GDDR6 with ECC; ECC on GDDR6 carves 1/16 of it, leaving
        # 45 GiB visible ([VIDUR] data/device_configs/a40.yml: total_memory_gb 45)
        hbm_bandwidth=696e9,  # [A40-DS] 696 GB/s
        matmul_efficiency=0.811,  # no published MAMF for A40: assume the other power-capped Ampere
        # board, A100 PCIe ([MAMF] 81.1 %)
        attention_efficiency=0.60,  # [FA2] Ampere figure, as for A100
        hbm_efficiency=_HBM_EFF,
        weight_stream_efficiency=_WEIGHT_STREAM_EFF,
    ),
    # The first Sarathi paper's (arXiv 2308.16369) LLaMA-13B GPU. The A40's chip (GA102) at its own
    # clocks, bandwidth and memory; the measured kernel fractions of that chip are the A40's
    # (kernels.py _SAME_CHIP: Vidur profiled the A40, no A6000).
    "rtx-a6000-48g": GpuSpec(
        name="rtx-a6000-48g",
        sm_count=84,  # [A6000-DS] 10,752 CUDA cores = 84 GA102 SMs of 128
        peak_flops=154.8e12,  # [GA102-WP] RTX A6000 FP16 Tensor, FP32 accumulate, dense
        hbm_bytes=48 * GiB,  # [A6000-DS] 48 GB GDDR6 (24 x 16 Gb chips). ECC is a setting on this board;
        # with it on, GDDR6 ECC carves 1/16 as on the A40 (45 GiB). The catalog takes it off.
        hbm_bandwidth=768e9,  # [A6000-DS] 768 GB/s
        matmul_efficiency=0.811,  # as the A40 (same chip; no published MAMF for either)
        attention_efficiency=0.60,  # [FA2] Ampere figure, as for A100 and A40
        hbm_efficiency=_HBM_EFF,
        weight_stream_efficiency=_WEIGHT_STREAM_EFF,
    ),
    "h100-80g-sxm": GpuSpec(
        name="h100-80g-sxm",
        sm_count=132,  # [SMS]
        peak_flops=989e12,  # [H100-DS] BF16 Tensor Core 1,979 TFLOPS with sparsity -> 989 dense
        fp8_peak_flops=1979e12,  # [H100-DS] FP8 Tensor Core 3,958 TFLOPS with sparsity -> 1,979 dense
        hbm_bytes=80 * GiB,  # [H100-DS] 80GB HBM3
        cuda_total_bytes=_CUDA_TOTAL_80G,
        hbm_bandwidth=3.35e12,  # [H100-DS] 3.35 TB/s
        matmul_efficiency=0.803,  # [MAMF] H100 SXM 794.5 / 989
        attention_efficiency=0.34,  # [FA2] 335 / 989 (FlashAttention-2, the paper-era kernel)
        hbm_efficiency=_HBM_EFF,
        weight_stream_efficiency=_WEIGHT_STREAM_EFF,
    ),
    "h200-141g": GpuSpec(
        name="h200-141g",
        sm_count=132,  # [SMS]
        peak_flops=989e12,  # [H200-DS] BF16 Tensor Core 1,979 TFLOPS with sparsity -> 989 dense
        fp8_peak_flops=1979e12,  # [H200-DS] FP8 Tensor Core 3,958 TFLOPS with sparsity -> 1,979 dense
        hbm_bytes=141 * GiB,  # [H200-DS] 141GB HBM3e (read as GiB like the 80 GB parts; CUDA reports ~140 GiB)
        hbm_bandwidth=4.8e12,  # [H200-DS] 4.8 TB/s
        matmul_efficiency=0.803,  # same GH100 die and 700 W limit as H100 SXM: [MAMF] 80.3 %
        attention_efficiency=0.34,  # [FA2] as H100
        hbm_efficiency=_HBM_EFF,
        weight_stream_efficiency=_WEIGHT_STREAM_EFF,
    ),
}

_GPU_ALIASES = {
    "a100-sxm": "a100-80g-sxm",
    "a100-pcie": "a100-80g-pcie",
    "a40": "a40-48g",
    "a40-48gb": "a40-48g",
    "a6000": "rtx-a6000-48g",
    "rtx-a6000": "rtx-a6000-48g",
    "nvidia-rtx-a6000": "rtx-a6000-48g",
    "h100": "h100-80g-sxm",
    "h100-80g": "h100-80g-sxm",
    "h100-sxm": "h100-80g-sxm",
    "h200": "h200-141g",
    "h200-sxm": "h200-141g",
}
_GPUS.update(RECENT_GPUS)  # recent_gpus.py: Ada, Hopper PCIe and H20, Blackwell
_GPU_ALIASES.update(RECENT_ALIASES)


# Names that fit more than one catalog card: refused with the choices, never guessed (the two
# A100s differ by 7 % in HBM bandwidth and 25 % in power cap, so by as much in predicted times).
_AMBIGUOUS = {
    name: ("a100-80g-pcie (the paper's Azure NC A100 v4 VMs; preset hardware=a100_80g)",
           "a100-80g-sxm (DGX/HGX A100; preset hardware=a100_80g_sxm)")
    for name in ("a100", "a100-80g", "a100-80gb")
}
_AMBIGUOUS.update(RECENT_AMBIGUOUS)


def known_gpus() -> list[str]:
    return sorted(_GPUS)


def get_gpu(name: str | GpuSpec) -> GpuSpec:
    """A catalog GPU by name or alias ('a100-80g-pcie', 'A100_PCIE', 'h100', ...)."""
    if isinstance(name, GpuSpec):
        return name
    key = _norm(name)
    if key in _AMBIGUOUS:
        raise HarnessError(f"GPU {name!r} is ambiguous; say which: {' or '.join(_AMBIGUOUS[key])}")
    key = _GPU_ALIASES.get(key, key)
    if key not in _GPUS:
        raise HarnessError(
            f"unknown GPU {name!r}; known: {', '.join(known_gpus())} "
            f"(aliases: {', '.join(sorted(_GPU_ALIASES))})"
        )
    return _GPUS[key]


# ---------------------------------------------------------------- topologies
@dataclass(frozen=True)
class Topology:
    """How GPUs of one node talk, and how nodes talk.

    GPUs are numbered node by node; within a node, consecutive groups of `nvlink_group` GPUs share
    a fast link (2 = NVLink bridges between pairs, gpus_per_node = NVSwitch). Any other pair in the
    node goes over `slow_link` (PCIe); GPUs on different nodes over `inter_node_link`.
    """

    name: str
    gpus_per_node: int
    nvlink_group: int
    fast_link: LinkSpec
    slow_link: LinkSpec
    inter_node_link: LinkSpec

    def with_gpus_per_node(self, gpus_per_node: int) -> Topology:
        if gpus_per_node < 1:
            raise HarnessError(f"gpus_per_node must be >= 1, got {gpus_per_node}")
        group = self.nvlink_group if self.nvlink_group < self.gpus_per_node else gpus_per_node
        return Topology(self.name, gpus_per_node, min(group, gpus_per_node), self.fast_link,
                        self.slow_link, self.inter_node_link)

    def link_between(self, a: int, b: int) -> LinkSpec:
        """The path between GPU a and GPU b."""
        if a // self.gpus_per_node != b // self.gpus_per_node:
            return self.inter_node_link
        if a // self.nvlink_group == b // self.nvlink_group:
            return self.fast_link
        return self.slow_link

    def ring_link(self, first: int, count: int) -> LinkSpec | None:
        """The slowest hop of a ring over GPUs first..first+count-1 (None for one GPU)."""
        if count <= 1:
            return None
        gpus = list(range(first, first + count))
        hops = [self.link_between(gpus[i], gpus[(i + 1) % count]) for i in range(count)]
        slowest = min(hops, key=lambda link: (link.effective_bandwidth, -link.latency_s))
        if slowest is not self.inter_node_link:
            return slowest
        nodes = [g // self.gpus_per_node for g in gpus]
        return slowest.for_ring(min(nodes.count(n) for n in set(nodes)))


_TOPOLOGIES: dict[str, Topology] = {
    # Sarathi-Serve OSDI'24 Sec. 5: A100 nodes of 4 GPUs, NVLink between pairs, PCIe otherwise,
    # 100 Gbps Ethernet between nodes ([VIDUR] device_configs/a100.yml: num_devices_per_node 4).
    "paper-a100": Topology("paper-a100", 4, 2, _LINKS["nvlink3"], _LINKS["pcie4"], _LINKS["eth100g"]),
    # Sarathi-Serve Sec. 5: one server of 8 A40 with pairwise NVLink ([VIDUR] a40.yml: 8 per node).
    "paper-a40": Topology("paper-a40", 8, 2, _LINKS["nvlink-a40"], _LINKS["pcie4-a40"], _LINKS["eth100g-a40"]),
    # DGX/HGX nodes: 8 GPUs on NVSwitch (every pair at full NVLink bandwidth), InfiniBand between nodes.
    "dgx-a100": Topology("dgx-a100", 8, 8, _LINKS["nvswitch-a100"], _LINKS["pcie4"], _LINKS["ib-hdr"]),
    "dgx-h100": Topology("dgx-h100", 8, 8, _LINKS["nvlink4"], _LINKS["pcie4"], _LINKS["ib-ndr"]),
    # NVSwitch nodes joined by plain 100 Gbps Ethernet (the brief's "DGX-style nodes + Ethernet").
    "nvswitch-a100-eth": Topology("nvswitch-a100-eth", 8, 8, _LINKS["nvswitch-a100"], _LINKS["pcie4"], _LINKS["eth100g"]),
    "nvswitch-h100-eth": Topology("nvswitch-h100-eth", 8, 8, _LINKS["nvlink4"], _LINKS["pcie4"], _LINKS["eth100g"]),
    # PCIe-only servers (no NVLink at all).
    "pcie-only": Topology("pcie-only", 8, 1, _LINKS["pcie4"], _LINKS["pcie4"], _LINKS["eth100g"]),
    # PCIe boxes of 8 cards (no NVLink), peer-to-peer on or off as a named choice (links.py: with it
    # off every byte is staged through host memory). "pcie-only" above is the Gen4 box with P2P on.
    "pcie4-no-p2p": Topology("pcie4-no-p2p", 8, 1, _LINKS["pcie4-host"], _LINKS["pcie4-host"], _LINKS["eth100g"]),
    "pcie5-p2p": Topology("pcie5-p2p", 8, 1, _LINKS["pcie5"], _LINKS["pcie5"], _LINKS["eth100g"]),
    "pcie5-no-p2p": Topology("pcie5-no-p2p", 8, 1, _LINKS["pcie5-host"], _LINKS["pcie5-host"], _LINKS["eth100g"]),
    # H100 PCIe cards in pairs joined by NVLink bridges (the optional bridge), PCIe Gen5 otherwise.
    "h100-pcie-nvlink": Topology("h100-pcie-nvlink", 8, 2, _LINKS["nvlink-bridge-h100"], _LINKS["pcie5"],
                                 _LINKS["eth100g"]),
    # HGX/DGX B200: 8 GPUs on NVLink5 switches, 400 Gb/s NDR between nodes ([B200-DS] in recent_gpus.py).
    "hgx-b200": Topology("hgx-b200", 8, 8, _LINKS["nvlink5"], _LINKS["pcie5"], _LINKS["ib-ndr"]),
}

# The node each GPU comes in unless the caller names one.
_DEFAULT_TOPOLOGY = {
    "a100-80g-sxm": "dgx-a100",  # the SXM module comes on an HGX/DGX board: 8 on NVSwitch (the paper's PCIe cards: paper-a100)
    "a100-80g-pcie": "paper-a100",
    "a40-48g": "paper-a40",
    "rtx-a6000-48g": "pcie-only",  # a workstation board: the paper runs one, so its links never matter
    "h100-80g-sxm": "dgx-h100",
    "h200-141g": "dgx-h100",
    # GeForce drivers refuse peer-to-peer between RTX 40-series cards (a patched kernel module,
    # tinygrad/open-gpu-kernel-modules, exists to turn it on; "GeForce cards do not support P2P", the
    # NCCL maintainer in NVIDIA/nccl-tests #287): NCCL stages through host memory, and vLLM's P2P
    # check turns its custom all-reduce off (links.py [VLLM-CAR]).
    "rtx-4090-24g": "pcie4-no-p2p",
    "l40s-48g": "pcie-only",  # PCIe Gen4 x16, P2P supported
    # professional cards: P2P over PCIe (vllm-project/vllm RFC #56128 measured four RTX PRO 6000 Server
    # Edition with PCIe peer-to-peer, no NVLink), so vLLM's custom all-reduce runs at TP2 ([VLLM-CAR])
    "rtx-pro-6000-server-96g": "pcie5-p2p",
    "rtx-pro-6000-ws-96g": "pcie5-p2p",
    "h100-80g-pcie": "pcie5-p2p",  # the NVLink bridge is a choice: topology h100-pcie-nvlink
    "h20-96g": "dgx-h100",  # an HGX H20 board: 8 GPUs on NVLink4 switches at 900 GB/s, as HGX H100
    "b200-180g": "hgx-b200",
    "cpu": "pcie-only",  # the CPU device (cpu_device.py): one device, so no link is ever priced
}

_TOPOLOGY_ALIASES = {"dgx-h200": "dgx-h100", "hgx-h100": "dgx-h100", "hgx-h200": "dgx-h100",
                     "hgx-a100": "dgx-a100", "pcie": "pcie-only", "pcie4-p2p": "pcie-only",
                     "hgx-h20": "dgx-h100", "dgx-b200": "hgx-b200"}


def default_topology(gpu: str) -> str:
    """The node `gpu` comes in unless the caller names one."""
    if gpu not in _DEFAULT_TOPOLOGY:
        raise HarnessError(f"no default node for {gpu!r}: name a topology ({', '.join(known_topologies())})")
    return _DEFAULT_TOPOLOGY[gpu]


def known_topologies() -> list[str]:
    return sorted(_TOPOLOGIES)


def get_topology(name: str | Topology | None, gpu: GpuSpec | None = None,
                 gpus_per_node: int | None = None) -> Topology:
    """A node topology by name ('paper_a100', 'dgx-h100', ...); None picks the GPU's default."""
    if isinstance(name, Topology):
        topo = name
    else:
        if name is None:
            if gpu is None:
                raise HarnessError("get_topology: give a topology name or a GPU")
            key = default_topology(gpu.name)
        else:
            key = _norm(name)
            key = _TOPOLOGY_ALIASES.get(key, key)
        if key not in _TOPOLOGIES:
            raise HarnessError(f"unknown topology {name!r}; known: {', '.join(known_topologies())}")
        topo = _TOPOLOGIES[key]
    if gpus_per_node is not None and int(gpus_per_node) != topo.gpus_per_node:
        topo = topo.with_gpus_per_node(int(gpus_per_node))
    return topo
