"""The Orca-style pipelined baseline of the first Sarathi paper's Sec. 5.4 (orca_best with
`micro_batches`): iteration-level scheduling with one batch per pipeline stage in flight (Orca,
OSDI'22, Sec. 4.2), its batch size B split across the pp micro-batches. Once loaded, an Orca-style
TP8-PP8 run keeps about pp micro-batches in flight; lumping every ready decode into one micro-batch
(micro_batches=1, the old baseline) leaves far fewer. The cap is exact under the fast-forward."""
from __future__ import annotations

import math

import numpy as np
import pytest

from engines.perf import Deployment, PerfModel
from engines.schedulers import EngineConfig, SchedulerConfig, make_engine, make_policy
from harness.backends.sim import simulate
from harness.backends.sim.iterations import IterationLog
from harness.records import RequestSpec
from tests.sim_checks import assert_same_records
from tests.test_sim import HalfStageTimer

PP, B, MAX_LEN = 8, 64, 4096


def _engine(micro_batches: int, b: int = B, kv: int | None = None, max_len: int = MAX_LEN):
    cfg = SchedulerConfig.shared("orca_best", max_num_seqs=b, micro_batches=micro_batches)
    return make_engine(EngineConfig(cfg, kv or b * max_len, max_len))


def _in_flight(cols: dict, loaded_from: float, loaded_to: float) -> float:
    """Time-weighted mean of micro-batches in flight over [loaded_from, loaded_to]."""
    edges = np.sort(np.concatenate([cols["start_s"], cols["end_s"], [loaded_from, loaded_to]]))
    edges = edges[(edges >= loaded_from) & (edges <= loaded_to)]
    mids = (edges[:-1] + edges[1:]) / 2
    count = ((cols["start_s"][None, :] <= mids[:, None]) & (mids[:, None] < cols["end_s"][None, :])).sum(axis=1)
    return float(np.sum(count * np.diff(edges)) / (loaded_to - loaded_from))


@pytest.fixture(scope="module")
def gpt3_tp8_pp8():
    """GPT-3 175B on 8 DGX A100 (TP-8 inside a node, PP-8 across), as the paper's Sec. 5.4 simulates it."""
    return PerfModel(Deployment.create(model="gpt3-175b", gpu="a100-80g-sxm", tp=8, pp=PP, topology="dgx-a100",
                                       stack="sarathi-2023"))


def _run(timer, micro_batches: int) -> dict:
    rng = np.random.default_rng(0)
    prompts = rng.integers(1024, 3700, 4 * B)
    reqs = [RequestSpec(i, 0.0, int(p), max(2, int(p) // 10)) for i, p in enumerate(prompts)]
    log = IterationLog(timer, len(reqs))
    recs = simulate(reqs, _engine(micro_batches), timer, pp=PP, log=log)
    assert all(r.completed for r in recs)
    cols = log.columns()
    # loaded: from the first finish (every slot has been filled) until the queue runs dry (the last admission)
    first_finish = min(r.finished_s for r in recs)
    last_admission = max(r.first_scheduled_s for r in recs)
    return {"in_flight": _in_flight(cols, first_finish, last_admission), "cols": cols}


def test_orca_style_keeps_about_pp_micro_batches_in_flight(gpt3_tp8_pp8):
    split = _run(gpt3_tp8_pp8, PP)
    assert split["in_flight"] >= 0.85 * PP
    per = split["cols"]["prefills"] + split["cols"]["decodes"]
    assert per.max() == math.ceil(B / PP)  # never more than its share of B
    lumped = _run(gpt3_tp8_pp8, 1)  # every ready decode in one micro-batch: the old baseline
    assert lumped["in_flight"] < 0.6 * PP


def test_micro_batches_cap_each_batch_and_admit_only_into_a_free_slot():
    policy = make_policy(SchedulerConfig("orca_best", max_num_seqs=10, micro_batches=4), MAX_LEN)
    assert policy.max_micro_batch_seqs == 3  # ceil(10 / 4)
    assert make_policy(SchedulerConfig("orca_best", max_num_seqs=10), MAX_LEN).max_micro_batch_seqs is None
    with pytest.raises(ValueError, match="micro_batches"):
        make_policy(SchedulerConfig("orca_best", micro_batches=0), MAX_LEN)
    with pytest.raises(ValueError, match="no knob 'micro_batches'"):  # decode-maximal batching never splits B
        make_policy(SchedulerConfig("decode_maximal", micro_batches=2), MAX_LEN)


@pytest.mark.parametrize("rate", (50.0, 1e9))  # arrivals spread out, and every request waiting at t = 0
def test_the_cap_is_exact_under_the_fast_forward(rate):
    rng = np.random.default_rng(7)
    lengths = [(int(p), int(o)) for p, o in zip(rng.integers(1, 300, 80), rng.integers(1, 200, 80))]
    t = np.cumsum(rng.exponential(1 / rate, len(lengths)))
    reqs = [RequestSpec(i, float(t[i]), p, o) for i, (p, o) in enumerate(lengths)]
    for mb in (2, 3):
        runs = [simulate(reqs, _engine(mb, b=9, max_len=512), HalfStageTimer(), pp=2, fast_forward=ff) for ff in (False, True)]
        assert_same_records(*runs)
