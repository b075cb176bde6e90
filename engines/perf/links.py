"""GPU-to-GPU links: datasheet peaks, and the measured curves that price collectives and sends.

A link without a measurement prices an all-reduce as NCCL's ring does on paper (start-up, then the
bus bytes over an achievable fraction of the peak) and a send as latency + bytes over its fraction.
Where Vidur's network profiles measured a link ([VIDUR-NET]: microsoft/vidur
data/profiling/network/{a100_pairwise_nvlink,a100_dgx,a40_pairwise_nvlink}, 2 KB to 512 MiB),
the link carries the measurement as a `Curve`: time against bytes, continuous and piecewise
linear, one or two segments. One straight line cannot follow the measurements: NCCL switches
protocol with the size (LL, LL128, Simple; nccl src/graph/tuning.cc picks the fastest per size), so
mid-size all-reduces on NVSwitch go at 135 GB/s and large ones at 192, and sends over 100 GbE slow
from 8.6 to 2.1 GB/s past 2.3 MiB. The curves are fitted to those operator profiles only, by
`python benchmarks/fit_operators.py` (section "link curves": trained on even-indexed sizes, scored
on the odd ones; a second segment only where it cuts the held-out MAPE by over a point).

All-reduce curves are in NCCL's bus bytes (2(p-1)/p of the payload; nccl-tests doc/PERFORMANCE.md),
the unit in which one link's rank counts agree, and all-gathers ((p-1)/p) use the same curve.
Abbreviations as in hardware.py. Where a first segment reads above the datasheet peak, it is a start-up plateau (the time barely
grows over it), not a bandwidth.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from common.errors import HarnessError


@dataclass(frozen=True)
class Curve:
    """Seconds to move x bytes: `latency_s`, then the bytes between starts[i] and starts[i+1] at
    seconds_per_byte[i] each (starts[0] = 0); 0 where x is 0."""

    latency_s: float
    seconds_per_byte: tuple[float, ...]
    starts: tuple[float, ...] = (0.0,)

    @classmethod
    def fitted(cls, latency_us: float, *segments: tuple[float, float]) -> Curve:
        """From fit_operators.py's printout: latency in us, then (segment start MiB, GB/s) pairs."""
        return cls(latency_us * 1e-6, tuple(1 / (gbs * 1e9) for _, gbs in segments),
                   tuple(mib * 2**20 for mib, _ in segments))

    def scaled(self, unit_bytes: float) -> Curve:
        """The same curve over units of `unit_bytes` bytes (a token's activations, a bus factor)."""
        return Curve(self.latency_s, tuple(s * unit_bytes for s in self.seconds_per_byte),
                     tuple(b / unit_bytes for b in self.starts))

    def faster(self, factor: float) -> Curve:
        """Every segment `factor` times the bandwidth, latency unchanged."""
        return Curve(self.latency_s, tuple(s / factor for s in self.seconds_per_byte), self.starts)

    @property
    def final_bandwidth(self) -> float:
        return 1.0 / self.seconds_per_byte[-1]

    def seconds(self, x: float) -> float:
        """`time` of one size as a Python float: the same operations in the same order."""
        if not x > 0:
            return 0.0
        if len(self.seconds_per_byte) == 1:
            return x * self.seconds_per_byte[0] + self.latency_s
        t = self.latency_s
        for per_byte, lo, hi in zip(self.seconds_per_byte, self.starts, self.starts[1:] + (math.inf,)):
            t = t + min(max(x - lo, 0.0), hi - lo) * per_byte
        return t

    def time(self, x) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        if len(self.seconds_per_byte) == 1:
            t = x * self.seconds_per_byte[0] + self.latency_s
        else:
            t = np.full(x.shape, self.latency_s)
            for per_byte, lo, hi in zip(self.seconds_per_byte, self.starts, self.starts[1:] + (math.inf,)):
                t = t + np.clip(x - lo, 0.0, hi - lo) * per_byte
        t *= x > 0
        return t


@dataclass(frozen=True)
class Cheapest:
    """The fastest of several implementations at each size: an engine that picks its all-reduce by
    the message size (vLLM's custom one-shot, symmetric memory or NCCL). Curve's interface."""

    curves: tuple[Curve, ...]

    def scaled(self, unit_bytes: float) -> Cheapest:
        return Cheapest(tuple(c.scaled(unit_bytes) for c in self.curves))

    def seconds(self, x: float) -> float:
        return min(c.seconds(x) for c in self.curves)

    def time(self, x) -> np.ndarray:
        return np.minimum.reduce([c.time(x) for c in self.curves])


@dataclass(frozen=True)
class LinkSpec:
    """A GPU-to-GPU path. `bandwidth` is the datasheet peak per direction; `efficiency` the
    achievable fraction (NCCL bus bandwidth / peak); `latency_s` the per-hop start-up cost."""

    name: str
    bandwidth: float  # B/s per direction
    latency_s: float
    efficiency: float = 1.0
    # NCCL's start-up cost of one all-reduce / all-gather over this link, where measured: nearly
    # independent of the rank count inside an NVLink domain. None: 2(p-1) (or p-1) hop latencies.
    collective_latency_s: float | None = None
    # Achievable fraction of `bandwidth` for one point-to-point send, where measured apart from the
    # collectives' (a send keeps the link busy one way; a ring all-reduce pays its protocol). None: efficiency.
    p2p_efficiency: float | None = None
    # Measured curves (module docstring): all-reduce time by bus bytes, send time by bytes. They
    # replace the fractions above where present.
    allreduce_curve: Curve | None = None
    p2p_curve: Curve | None = None
    # Links between nodes: all-reduce curves measured with g GPUs of the ring on each node, (g, curve)
    # by g; `for_ring` picks one (NCCL runs a ring's channels over several NICs, so g matters).
    allreduce_by_node: tuple[tuple[int, Curve], ...] = ()
    # Rings of at most r ranks measured faster than the box's `efficiency`: (r, fraction) pairs,
    # smallest r first; a ring takes the first whose r is not below its ranks.
    efficiency_by_ranks: tuple[tuple[int, float], ...] = ()

    @property
    def effective_bandwidth(self) -> float:
        if self.allreduce_curve is not None:
            return self.allreduce_curve.final_bandwidth
        return self.bandwidth * self.efficiency

    def ring_bandwidth(self, ranks: int) -> float:
        """A collective's bus bandwidth over a ring of `ranks` ranks on this link."""
        for most, fraction in self.efficiency_by_ranks:
            if ranks <= most:
                return self.bandwidth * fraction
        return self.effective_bandwidth

    @property
    def p2p_bandwidth(self) -> float:
        if self.p2p_curve is not None:
            return self.p2p_curve.final_bandwidth
        return self.bandwidth * (self.efficiency if self.p2p_efficiency is None else self.p2p_efficiency)

    def for_ring(self, gpus_per_node: int) -> LinkSpec:
        """This link as a ring with `gpus_per_node` of its GPUs on each node sees it: the curve
        measured with the most GPUs a node not above that (the fewest where all are above)."""
        if not self.allreduce_by_node:
            return self
        fits = [c for g, c in self.allreduce_by_node if g <= gpus_per_node] or [self.allreduce_by_node[0][1]]
        return replace(self, allreduce_curve=fits[-1])


# [VIDUR-NET] fits, printed by benchmarks/fit_operators.py (held-out MAPE after each).
_NVSWITCH_A100_ALLREDUCE = Curve.fitted(34.2, (0, 134.7), (19.11, 192.2))  # 2, 4 and 8 GPUs: 9.3 %
_NVSWITCH_A100_SEND = Curve.fitted(14.9, (0, 339.0), (18.68, 205.0))  # 4.1 %
_HDR_ALLREDUCE_BY_NODE = (  # a100_dgx, two nodes of 1, 2, 4 and 8 GPUs: 2.2, 13.6, 3.9, 12.2 %
    (1, Curve.fitted(72.7, (0, 5.9))),
    (2, Curve.fitted(116.8, (0, 10.6), (21.84, 5.0))),
    (4, Curve.fitted(90.4, (0, 7.3), (1.93, 22.6))),
    (8, Curve.fitted(98.0, (0, 5.4), (6.67, 21.9))),
)
_NDR_ALLREDUCE_BY_NODE = tuple((g, c.faster(2.0)) for g, c in _HDR_ALLREDUCE_BY_NODE)

# [NCCL-1639] NVIDIA/nccl issue #1639 (2025-03-14): 8 x RTX 5090 (GB202, PCIe Gen5 x16, two Xeon
# 8480+, ACS off), nccl-tests all_reduce_perf 1-8 GB: 28 GB/s of bus bandwidth with 8 GPUs, 35 GB/s
# with 4 ("on PCI systems, the performance you get is usually determined by the bandwidth your CPU
# and memory can deliver", the NCCL maintainer's reply). GeForce cards do not support P2P (the same
# maintainer, NVIDIA/nccl-tests issue #287), so the ring is staged through host memory. 28 / 64 =
# 0.4375 of a Gen5 x16 direction for the 8-GPU box, 35 / 64 = 0.547 for rings of up to 4 GPUs (the
# nearest measured size not below: TP2 and TP4 take it). No Gen5 ring with P2P on was found
# published: P2P rings cross the same root complex and take these.
_GEN5_RING = 28e9 / 64e9
_GEN5_RING_BY_RANKS = ((4, 35e9 / 64e9),)

_NVLINK3 = LinkSpec("nvlink3", bandwidth=300e9, latency_s=5e-6,
                    allreduce_curve=Curve.fitted(52.7, (0, 451.9), (6.85, 192.1)),
                    p2p_curve=Curve.fitted(8.8, (0, 474.8), (5.68, 329.8)))

_LINKS: dict[str, LinkSpec] = {
    # A100 NVLink3: 12 links x 25 GB/s per direction = 600 GB/s bidirectional ([A100-DS] "NVLink:
    # 600 GB/s"; the PCIe card reaches it with three NVLink bridges for 2 GPUs): the paper's pairwise
    # servers. [VIDUR-NET] a100_pairwise_nvlink, 2 GPUs: all-reduces take 50-65 us from 30 KB to
    # 8 MiB, then 192 GB/s of bus bytes (4.2 %); sends 8.8 us, then 330 GB/s past 5.7 MiB (3.8 %).
    "nvlink3": _NVLINK3,
    # The same NVLink3 through NVSwitch (DGX/HGX A100, 8 GPUs): [VIDUR-NET] a100_dgx, one node.
    "nvswitch-a100": LinkSpec("nvswitch-a100", bandwidth=300e9, latency_s=5e-6,
                              allreduce_curve=_NVSWITCH_A100_ALLREDUCE, p2p_curve=_NVSWITCH_A100_SEND),
    # A40 NVLink bridge: 112.5 GB/s bidirectional ([A40-DS]). [VIDUR] a40 all_reduce, 2 GPUs:
    # 33.5 MB in 0.83 ms = 40 GB/s bus bandwidth = 0.72 of 56.25 GB/s. Sends on the paper's A40 server
    # (Vidur network/a40_pairwise_nvlink/send_recv.csv, 2 GPUs of one node) run at 4.0-4.3 GB/s from
    # 128 KB to 64 MiB, 4 us for the smallest: no GPU peer-to-peer for sends on that host (the
    # all-reduce uses the bridge), so they are staged through host memory: 4.1 GB/s = 0.073 of 56.25.
    "nvlink-a40": LinkSpec("nvlink-a40", bandwidth=56.25e9, latency_s=4e-6, efficiency=0.72, p2p_efficiency=0.073),
    # PCIe Gen4 x16: 64 GB/s bidirectional ([A100-DS], [A40-DS] "PCIe Gen4: 64GB/s").
    # [VIDUR] a100_pairwise_nvlink all_reduce, 4 GPUs (ring crosses PCIe): 500 MB in 31.8 ms
    # -> bus bandwidth 1.5 * 500e6 / 31.8e-3 = 23.6 GB/s = 0.74 of 32 GB/s.
    "pcie4": LinkSpec("pcie4", bandwidth=32e9, latency_s=10e-6, efficiency=0.74),
    # The same PCIe on the paper's A40 server, whose sends are staged through host memory (above):
    # 4.1 GB/s = 0.128 of 32 GB/s, 4 us.
    "pcie4-a40": LinkSpec("pcie4-a40", bandwidth=32e9, latency_s=10e-6, efficiency=0.74, p2p_efficiency=0.128),
    # H100/H200 NVLink4 via NVSwitch: 900 GB/s bidirectional ([H100-DS], [H200-DS]). 0.78 is the
    # first model's NVLink figure; no H100 collective is measured here, and the A100's NVSwitch
    # curve (0.64 of peak at large sizes) is not carried over.
    "nvlink4": LinkSpec("nvlink4", bandwidth=450e9, latency_s=5e-6, efficiency=0.78),
    # B200 NVLink5 via NVSwitch: 1.8 TB/s bidirectional a GPU ([B200-DS], recent_gpus.py). Nothing
    # measured: NVLink4's 0.78 and start-up (a sibling assumption).
    "nvlink5": LinkSpec("nvlink5", bandwidth=900e9, latency_s=5e-6, efficiency=0.78),
    # H100 PCIe pairs with NVLink bridges: 600 GB/s bidirectional ([H100-DS] H100 PCIe column), the
    # bandwidth of the A100 PCIe's three bridges, whose measured pair curves ("nvlink3") it takes.
    "nvlink-bridge-h100": replace(_NVLINK3, name="nvlink-bridge-h100"),
    # PCIe Gen5 x16: 128 GB/s bidirectional ([H100-DS] H100 PCIe, [PRO6000-DS]). Ring fraction
    # [NCCL-1639]: 0.4375 of 64 GB/s, 0.547 up to 4 ranks (the Gen4 ring's 0.74 before: a sibling
    # figure Gen5 boxes do not reach); 10 us a hop as Gen4's.
    "pcie5": LinkSpec("pcie5", bandwidth=64e9, latency_s=10e-6, efficiency=_GEN5_RING,
                      efficiency_by_ranks=_GEN5_RING_BY_RANKS),
    # Peer-to-peer off ("no-p2p" topologies: GeForce drivers refuse P2P, or NCCL_P2P_DISABLE=1): NCCL
    # moves each chunk through a pinned host buffer (its SHM transport), a device-to-host copy then a
    # host-to-device copy, so every byte crosses PCIe twice and each hop pays two start-ups. Gen4:
    # priced as that, half the P2P ring's fraction (0.37) and twice its hop latency. Gen5: the
    # measured ring [NCCL-1639] is this path (GeForce cards, no P2P), so its fraction, twice the hop
    # latency. A send staged through host memory is the one such path measured here: the paper's A40
    # server, 4.1 GB/s = 0.128 of Gen4 ("pcie4-a40"), taken for both generations (Gen5's: a sibling
    # assumption).
    "pcie4-host": LinkSpec("pcie4-host", bandwidth=32e9, latency_s=20e-6, efficiency=0.37, p2p_efficiency=0.128),
    "pcie5-host": LinkSpec("pcie5-host", bandwidth=64e9, latency_s=20e-6, efficiency=_GEN5_RING,
                           efficiency_by_ranks=_GEN5_RING_BY_RANKS, p2p_efficiency=0.128),
    # 100 Gbps Ethernet between the paper's A100 nodes (Sarathi-Serve OSDI'24, Sec. 5). Collectives:
    # 0.6 of 12.5 GB/s and 12 us a hop (no cross-node all-reduce is measured on these servers).
    # [VIDUR-NET] a100_pairwise_nvlink send_recv across nodes: 14 us, 8.6 GB/s, past 2.3 MiB
    # 2.1 GB/s (socket buffers; 14.1 %: 4-8 MiB sends scatter by 2x between neighbouring sizes).
    "eth100g": LinkSpec("eth100g", bandwidth=12.5e9, latency_s=12e-6, efficiency=0.6,
                        p2p_curve=Curve.fitted(14.3, (0, 8.6), (2.33, 2.1))),
    # The same Ethernet from the paper's A40 server: [VIDUR-NET] a40_pairwise_nvlink send_recv across
    # nodes, slower than the A100 servers' under 8 MiB (75 us, 3.1 GB/s, past 11.8 MiB 2.1: 7.2 %).
    "eth100g-a40": LinkSpec("eth100g-a40", bandwidth=12.5e9, latency_s=12e-6, efficiency=0.6,
                            p2p_curve=Curve.fitted(75.4, (0, 3.1), (11.81, 2.1))),
    # InfiniBand HDR 200 Gb/s per GPU (DGX A100: 8 x ConnectX-6 200 Gb/s, NVIDIA DGX A100
    # datasheet); NDR 400 Gb/s per GPU (DGX H100: 8 x ConnectX-7). HDR measured between two
    # a100_dgx nodes (Vidur send_recv, 1 GPU per node, up to 64 MiB): 29 us + 7.8 GB/s = 0.31 of
    # 25 GB/s. All-reduces by GPUs a node (above): 6 GB/s of bus bytes with 1 or 2 a node, 22 GB/s
    # with 4 or 8 (not 8 x 25: the measurements are what the cluster gave). NDR: not measured, HDR's
    # curves at twice the bandwidth.
    "ib-hdr": LinkSpec("ib-hdr", bandwidth=25e9, latency_s=29e-6, efficiency=0.31,
                       allreduce_curve=_HDR_ALLREDUCE_BY_NODE[0][1], allreduce_by_node=_HDR_ALLREDUCE_BY_NODE),
    "ib-ndr": LinkSpec("ib-ndr", bandwidth=50e9, latency_s=29e-6, efficiency=0.31,
                       allreduce_curve=_NDR_ALLREDUCE_BY_NODE[0][1], allreduce_by_node=_NDR_ALLREDUCE_BY_NODE),
}


# An engine's own all-reduce kernels, by kernel set and the link they run over: curves over bus
# bytes, used where they beat the link's NCCL pricing. vLLM (2025) on H100 NVSwitch: the fastest of
# its implementations at each size in vllm-project/vllm PR #24111 ("Enable Torch Symmetric Memory
# All-Reduce By Default", H100 table, ms per all-reduce: TP2 0.5 MiB 0.007; TP4 0.5-4 MiB 0.010,
# 0.015, 0.019, 0.022, 0.025, 0.029; TP6 0.5-4 MiB 0.013, 0.016, 0.021, 0.031; one-shot custom
# all-reduce up to 2 MiB, symmetric-memory two-shot above), measured as back-to-back CUDA-graph
# replays (benchmarks/kernels/benchmark_device_communicators.py: no compute between them, so no
# skew between ranks: a lower bound). Fit (fit_operators.py): 7.9 us + bus bytes at 273 GB/s,
# 11.3 % over those 11 points (H200: the same NVLink4 switch, assumed alike). The same PR's NCCL
# column is 17-26 us at TP4 0.5-2 MiB, where the nvlink4 line above gives 32-39 us: that line stays
# the other engines' NCCL (no H100 NCCL profile here to replace it with).
#
# [VLLM-CAR] vLLM's custom all-reduce on GPUs joined by PCIe only (vllm 0.32.0,
# distributed/device_communicators/custom_all_reduce.py `CustomAllreduce.__init__`): disabled on
# "more than two PCIe-only GPUs" (same_node and world_size > 2 and not fully_connected), and
# disabled where "your platform lacks GPU P2P capability or P2P test failed" (`_can_p2p`, which runs
# all_reduce_utils.gpu_p2p_access_check); then `should_custom_ar` takes it at world size 2 for
# payloads under max_size (8 MiB: no sm89/sm120 entry in all_reduce_utils.CUSTOM_ALL_REDUCE_MAX_SIZES)
# and cuda_communicator.py `CudaCommunicator.all_reduce` falls back to pynccl otherwise. So at TP2
# over a P2P link it runs the one-shot kernel (each rank reads its peer's payload: bus bytes = the
# payload at p = 2), over a host-staged link ("-host": the P2P check fails) or at TP > 2 NCCL's ring.
# Priced: the H100 fit's 7.9 us start-up (the same kernel; no PCIe timing of it was found, an
# assumption) + the payload at the link's ring fraction of PCIe for 2 ranks (Gen4 0.74 [VIDUR], Gen5
# 0.547 [NCCL-1639]: what the root complex delivers). Above 8 MiB vLLM runs NCCL, 2 x 10 us of hops instead
# of 7.9 us at the same bandwidth: not priced apart (the cheaper is taken).
ALLREDUCE_KERNELS: dict[str, dict[str, Curve]] = {
    "vllm-2025": {"nvlink4": Curve.fitted(7.9, (0, 273.1)),
                  "pcie4": Curve.fitted(7.9, (0, 32 * 0.74)),
                  "pcie5": Curve.fitted(7.9, (0, 64 * _GEN5_RING_BY_RANKS[0][1]))},
}
# Links without NVLink between all GPUs: the engine's own kernels run at two ranks only [VLLM-CAR].
PCIE_ONLY_LINKS = frozenset({"pcie4", "pcie5"})


def engine_allreduce(kernels: str | None, link: LinkSpec | None, ranks: int) -> Curve | None:
    """An engine's own all-reduce over `link` at `ranks` ranks where it runs one (curve over bus
    bytes), else None (NCCL's ring)."""
    if ranks <= 1 or link is None:
        return None
    own = ALLREDUCE_KERNELS.get(kernels or "", {}).get(link.name)
    if own is None or (link.name in PCIE_ONLY_LINKS and ranks != 2):
        return None
    return own


def _norm(name: str) -> str:
    return str(name).strip().lower().replace("_", "-").replace(" ", "-")


def known_links() -> list[str]:
    return sorted(_LINKS)


def get_link(name: str | LinkSpec) -> LinkSpec:
    if isinstance(name, LinkSpec):
        return name
    key = _norm(name)
    if key not in _LINKS:
        raise HarnessError(f"unknown link {name!r}; known: {', '.join(known_links())}")
    return _LINKS[key]
