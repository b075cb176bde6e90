"""The candidate causes of the two Sarathi-Serve pipeline misses (benchmarks/pp_gap_whatifs.py), each
a what-if: the numbers engines/perf/README.md ("The pipeline-parallel gap") states, and the contract
that none of them, alone, is a shown cause. When a cited operator cost closes a gap this file fails
with the xfails in test_perf_model.py, and both move together."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import pp_gap_whatifs as w  # noqa: E402

NEEDED = w.SLO_DECODE_S  # 200 ms: the paper's strict SLO (1 s) over 5
TOL = 0.35  # the SLO tests' tolerance (test_perf_model.py)


@pytest.fixture(scope="module")
def falcon():
    return w.pp_candidates(w.FALCON_PP)


@pytest.fixture(scope="module")
def llama():
    return w.pp_candidates(w.LLAMA_PP)


def _ms(rows, key):
    return round(rows[key] * 1e3, 1)


def test_pp_decode_candidates_as_documented(falcon, llama):
    # engines/perf/README.md quotes these (ms)
    assert [_ms(falcon, k) for k in falcon] == [88.8, 49.3, 98.6, 87.5, 89.4, 89.6, 98.8, 110.1, 79.2]
    assert [_ms(llama, k) for k in llama] == [117.7, 65.4, 130.8, 110.8, 118.7, 118.5, 127.7, 142.6, 104.6]


def test_no_single_candidate_closes_the_falcon_decode(falcon):
    # Falcon misses the 200 ms under every candidate, and under all of them at once.
    assert max(falcon.values()) < (1 - TOL) * NEEDED


def test_llama_closes_only_by_stacking_a_reading_on_upper_bounds(llama):
    # LLaMA2-70B: no operator cost alone gets within 35 % of 200 ms; the period of two micro-batches of
    # 32 each (a reading of "a decode iteration", not a cost) lands 0.4 points inside, and only the
    # stack with an upper bound (a missed 10 ms wake-up) comes clearly in. Neither is a shown cause.
    costs = ("as priced: both stages + the send", "input preparation on every stage", "tp concurrent stage sends")
    assert all(llama[k] < (1 - TOL) * NEEDED for k in costs)
    assert llama["period, pp micro-batches of 32 each in flight"] == pytest.approx((1 - TOL) * NEEDED, abs=1e-3)


def test_tp8_candidates_as_documented():
    small, slo_unit = w.tp8_candidates(8, 2048), w.tp8_candidates(32, 4096)
    assert [round(v, 2) for v in small.values()] == [0.76, 0.79, 0.81, 0.94, 1.33, 0.75]
    assert [round(v, 2) for v in slo_unit.values()] == [0.89, 0.89, 1.07, 1.18, 1.51, 0.87]
    # every founded what-if stays outside the claim's 35 % (2x: 1.3 to 2.7); only the loose upper
    # bound (all 14 ring steps at TCP's small-message time) reaches into it
    founded = [k for k in small if "upper bound" not in k]
    assert max(max(small[k], slo_unit[k]) for k in founded) < 2.0 * (1 - TOL)


def test_tp8_needs_a_bus_bandwidth_far_below_any_published_tcp_figure():
    # 2x needs 0.35 GB/s of bus bandwidth at a decode of 8 (1.2 GB/s at 32 x 4k): under a third of the
    # lowest published NCCL-over-100-GbE figure (nccl#450: 4-6 GB/s)
    assert w.busbw_for(2.0, 8, 2048) == pytest.approx(0.35e9, rel=0.02)
    assert w.busbw_for(2.0, 32, 4096) < w.TCP_BUSBW_LOW / 3
