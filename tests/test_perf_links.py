"""Measured link curves (engines/perf/links.py): the segment arithmetic, the scalar path the
simulator prices one batch with, which curve a ring across nodes gets, and that the constants are
what benchmarks/fit_operators.py fits to Vidur's network profiles."""
from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engines.perf import operators as ops
from engines.perf.hardware import get_topology
from engines.perf import Deployment, PerfModel
from engines.perf.links import ALLREDUCE_KERNELS, Cheapest, Curve, get_link
from harness.analysis.perf_model import vidur_points as vp

ROOT = Path(__file__).resolve().parent.parent
TWO = Curve.fitted(10.0, (0, 100.0), (1.0, 50.0))  # 10 us, 100 GB/s for 1 MiB, then 50 GB/s


def test_a_two_segment_curve_is_latency_then_each_segment_at_its_bandwidth():
    mib = 2**20
    assert TWO.time(0.0) == 0.0
    assert TWO.time(mib / 2) == pytest.approx(10e-6 + mib / 2 / 100e9, rel=1e-12)
    assert TWO.time(3 * mib) == pytest.approx(10e-6 + mib / 100e9 + 2 * mib / 50e9, rel=1e-12)
    below, above = TWO.time(mib * (1 - 1e-9)), TWO.time(mib * (1 + 1e-9))
    assert above - below == pytest.approx(0.0, abs=1e-12)  # continuous at the knee (a jump would be us)
    per_token = TWO.scaled(1000.0)  # the same curve in units of 1,000 bytes
    assert per_token.time(3 * mib / 1000) == pytest.approx(TWO.time(3 * mib), rel=1e-12)
    assert TWO.faster(2.0).time(3 * mib) - 10e-6 == pytest.approx((TWO.time(3 * mib) - 10e-6) / 2, rel=1e-12)


@settings(max_examples=200, deadline=None)
@given(st.floats(min_value=0.0, max_value=1e9, allow_nan=False))
def test_the_scalar_path_is_the_vector_path_bit_for_bit(x):
    for curve in (TWO, get_link("eth100g").p2p_curve, ops.allreduce_curve(2, get_link("nvlink3")),
                  ops.allreduce_curve(4, get_link("pcie4"))):
        assert curve.seconds(x) == float(curve.time(np.array([x]))[0])


def test_a_ring_across_nodes_gets_the_curve_measured_with_its_gpus_a_node():
    ib = get_link("ib-hdr")
    by_node = dict(ib.allreduce_by_node)
    dgx = get_topology("dgx-a100")
    assert dgx.ring_link(0, 8).name == "nvswitch-a100"  # one node: no InfiniBand
    assert dgx.ring_link(0, 16).allreduce_curve == by_node[8]
    assert dgx.ring_link(4, 8).allreduce_curve == by_node[4]  # GPUs 4-11: four on each node
    assert dgx.ring_link(0, 12).allreduce_curve == by_node[4]  # 8 + 4: the node with fewer
    assert get_topology("dgx-a100", gpus_per_node=3).ring_link(0, 6).allreduce_curve == by_node[2]
    # 16 ranks on two nodes at 64 MiB: about 3x faster on the 8-a-node curve than on the 1-a-node one
    size = 64 * 2**20
    assert 2.5 < ops.allreduce_time(size, 16, ib) / ops.allreduce_time(size, 16, dgx.ring_link(0, 16)) < 4.0


def test_unmeasured_links_keep_the_ring_arithmetic():
    pcie = get_link("pcie4")
    assert pcie.allreduce_curve is None and pcie.p2p_curve is None
    nbytes = 8e6
    assert ops.allreduce_time(nbytes, 4, pcie) == pytest.approx(6 * 10e-6 + 1.5 * nbytes / (32e9 * 0.74), rel=1e-12)
    assert ops.p2p_time(nbytes, pcie) == pytest.approx(10e-6 + nbytes / (32e9 * 0.74), rel=1e-12)


def _fitter():
    spec = importlib.util.spec_from_file_location("fit_operators", ROOT / "benchmarks" / "fit_operators.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.skipif(not (vp.VIDUR_DIR / "network").is_dir(),
                    reason=f"Vidur's network profiles are not at {vp.VIDUR_DIR} (../shared is not in every checkout)")
def test_the_curves_are_what_the_fitting_script_fits():
    fit = _fitter()
    net = fit.network_rows(vp.VIDUR_DIR)
    ib = dict(get_link("ib-hdr").allreduce_by_node)
    expected = {"nvlink3 all-reduce": get_link("nvlink3").allreduce_curve, "nvlink3 send": get_link("nvlink3").p2p_curve,
                "eth100g send": get_link("eth100g").p2p_curve, "eth100g-a40 send": get_link("eth100g-a40").p2p_curve,
                "nvswitch-a100 all-reduce": get_link("nvswitch-a100").allreduce_curve,
                "nvswitch-a100 send": get_link("nvswitch-a100").p2p_curve,
                **{f"ib-hdr all-reduce, {g} a node": ib[g] for g in (1, 2, 4, 8)}}
    assert set(expected) == {name for name, *_ in fit.LINK_POINTS}
    for name, curve in expected.items():
        latency_s, starts, bandwidths, _, held_out = fit.chosen_curve(net, name)
        assert held_out < 15.0, name
        assert curve.latency_s == pytest.approx(latency_s, abs=0.051e-6), name
        assert [1 / s for s in curve.seconds_per_byte] == pytest.approx(bandwidths, abs=0.051e9), name
        assert curve.starts == pytest.approx(starts, abs=0.0051 * 2**20), name
        assert math.isclose(curve.starts[0], 0.0)


def test_vllm_v1_uses_its_own_all_reduce_where_it_is_faster():
    """The vllm-v1-2025 stack on H100 NVSwitch: the faster of vLLM's kernels (PR #24111's fit) and
    NCCL's ring at each size; other stacks keep NCCL's; the constants are the fitting script's."""
    alpha, bw, err = _fitter().vllm_allreduce_curve()
    own = ALLREDUCE_KERNELS["vllm-2025"]["nvlink4"]
    assert own.latency_s == pytest.approx(alpha, abs=0.051e-6) and own.final_bandwidth == pytest.approx(bw, abs=0.051e9)
    assert err < 15.0
    link = get_link("nvlink4")
    curve = ops.allreduce_curve(4, link, "vllm-2025")
    assert isinstance(curve, Cheapest) and ops.allreduce_curve(4, link) == ops.allreduce_curve(4, link, None)
    small, large = 2**19, 256 * 2**20  # a decode batch's 0.5 MiB; a long prefill's 256 MiB
    assert curve.time(small) == pytest.approx(7.9e-6 + 1.5 * small / 273.1e9, rel=1e-9)  # PR #24111: 10 us
    assert curve.time(large) == pytest.approx(float(ops.allreduce_time(large, 4, link)), rel=1e-12)  # NCCL wins
    v1, nccl = (PerfModel(Deployment.create(model="qwen3-32b", gpu="h100", tp=4, stack=s)) for s in ("vllm-v1-2025", "ideal"))
    batch = ([1] * 60, [4000] * 60)
    assert v1.breakdown(*batch)["tp_comm"] < 0.5 * nccl.breakdown(*batch)["tp_comm"]


def test_vllm_custom_all_reduce_on_pcie_runs_at_two_ranks_with_p2p_only():
    """vLLM 0.32 custom_all_reduce.py: disabled on more than two PCIe-only GPUs and where the P2P
    check fails; at TP2 over P2P its one-shot kernel (7.9 us + the payload at the link's ring fraction)
    beats NCCL's 2 hops of 10 us, so a decode's all-reduce costs less; elsewhere NCCL's ring, unchanged."""
    small = 2**19  # a decode batch's 0.5 MiB
    for name, gbs in (("pcie4", 32 * 0.74), ("pcie5", 35.0)):
        link = get_link(name)
        pair = ops.allreduce_curve(2, link, "vllm-2025")
        assert isinstance(pair, Cheapest)
        assert pair.time(small) == pytest.approx(7.9e-6 + small / (gbs * 1e9), rel=1e-9)
        assert pair.time(small) < ops.allreduce_curve(2, link).time(small)
        assert ops.allreduce_curve(4, link, "vllm-2025") == ops.allreduce_curve(4, link)  # > 2 PCIe-only GPUs
    for host in ("pcie4-host", "pcie5-host"):  # the P2P check fails: NCCL through host memory
        link = get_link(host)
        assert ops.allreduce_curve(2, link, "vllm-2025") == ops.allreduce_curve(2, link)
    # end to end: an RTX PRO 6000 pair (P2P on by default) under vLLM against the same box without P2P
    p2p, host = (PerfModel(Deployment.create(model="llama3-8b", gpu="rtx-pro-6000-ws", tp=2, stack="vllm-0.32",
                                             topology=t)) for t in ("pcie5-p2p", "pcie5-no-p2p"))
    batch = ([1] * 32, [2000] * 32)
    assert p2p.breakdown(*batch)["tp_comm"] < 0.5 * host.breakdown(*batch)["tp_comm"]


def test_a_gen5_ring_takes_the_measured_gb202_fraction():
    """NVIDIA/nccl #1639: RTX 5090s over Gen5, 28 GB/s of bus bandwidth with 8 GPUs (0.4375 of 64 GB/s),
    35 with 4 (0.547), for P2P on and off alike (the Gen4 ring's 0.74 before)."""
    nbytes = 64 * 2**20
    for name, hop in (("pcie5", 10e-6), ("pcie5-host", 20e-6)):
        link = get_link(name)
        assert link.efficiency == 28 / 64 and link.latency_s == hop
        for ranks, gbs in ((2, 35e9), (4, 35e9), (8, 28e9)):
            steps = 2 * (ranks - 1)
            assert ops.allreduce_time(nbytes, ranks, link) == pytest.approx(
                steps * hop + steps / ranks * nbytes / gbs, rel=1e-12), (name, ranks)
    pcie4 = get_link("pcie4")  # Gen4 keeps one fraction at every size
    assert pcie4.ring_bandwidth(2) == pcie4.ring_bandwidth(8) == pcie4.effective_bandwidth
