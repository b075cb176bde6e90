"""The simulator's offline modes: closed-loop arrivals (each finish releases the next request, at
most `concurrency` outstanding) and the iteration log (composition, hybrid iterations' parts
priced alone, pipeline bubbles by cause). Both leave what they do not concern exact: the log only
observes, and the closed loop's fast-forward equals plain stepping."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engines.schedulers import EngineConfig, SchedulerConfig, make_engine
from harness.backends.sim import simulate
from harness.backends.sim.iterations import IterationLog
from harness.records import RequestSpec
from tests.sim_checks import assert_same_records
from tests.test_sim import HalfStageTimer, WindowedTimer

MAX_LEN = 512
POLICIES = ("decode_maximal", "orca_worst", "orca_best", "sarathi", "vllm")


def _engine(policy, b=6, kv=None):
    cfg = SchedulerConfig.shared(policy, max_num_seqs=b, chunk_size=64, tile_tokens=32, token_budget=96)
    return make_engine(EngineConfig(cfg, kv or 8 * MAX_LEN, MAX_LEN))


def _offline(lengths):
    return [RequestSpec(100 + i, 0.0, p, o) for i, (p, o) in enumerate(lengths)]


def _outstanding(records, t):
    return sum(r.arrival_s <= t < r.finished_s for r in records)


@pytest.mark.parametrize("policy", POLICIES)
def test_closed_loop_keeps_the_limit_and_releases_on_finishes(policy):
    rng = np.random.default_rng(5)
    lengths = [(int(p), int(o)) for p, o in zip(rng.integers(10, 300, 30), rng.integers(2, 150, 30))]
    recs = simulate(_offline(lengths), _engine(policy), WindowedTimer(), concurrency=4)
    assert all(r.completed for r in recs) and [r.request_id for r in recs] == list(range(100, 130))
    assert [r.arrival_s for r in recs[:4]] == [0.0] * 4
    finishes = sorted(r.finished_s for r in recs)
    # request i (i >= 4) is released by the (i - 3)-th finish, in input order
    assert [r.arrival_s for r in recs[4:]] == finishes[:26]
    assert max(_outstanding(recs, t) for t in finishes + [0.0]) == 4
    assert all(r.first_scheduled_s >= r.arrival_s for r in recs)


@settings(max_examples=25, deadline=None)
@given(lengths=st.lists(st.tuples(st.integers(1, 300), st.integers(1, 200)).filter(lambda t: sum(t) <= MAX_LEN),
                        min_size=1, max_size=40),
       policy=st.sampled_from(POLICIES), concurrency=st.integers(1, 10))
def test_closed_loop_fast_forward_equals_plain_stepping(lengths, policy, concurrency):
    reqs = _offline(lengths)
    plain = simulate(reqs, _engine(policy), WindowedTimer(), fast_forward=False, concurrency=concurrency)
    fast = simulate(reqs, _engine(policy), WindowedTimer(), fast_forward=True, concurrency=concurrency)
    assert_same_records(plain, fast)


@pytest.mark.parametrize("policy", POLICIES)
def test_closed_loop_under_pipeline_parallelism(policy):
    rng = np.random.default_rng(2)
    lengths = [(int(p), int(o)) for p, o in zip(rng.integers(10, 300, 30), rng.integers(2, 150, 30))]
    recs = simulate(_offline(lengths), _engine(policy), HalfStageTimer(), pp=2, concurrency=5)
    assert all(r.completed for r in recs)
    assert max(_outstanding(recs, r.finished_s) for r in recs) <= 5


@pytest.mark.parametrize("policy", POLICIES)
def test_the_log_observes_and_accounts_for_every_token(policy):
    rng = np.random.default_rng(9)
    lengths = [(int(p), int(o)) for p, o in zip(rng.integers(10, 300, 40), rng.integers(2, 150, 40))]
    reqs = _offline(lengths)
    bare = simulate(reqs, _engine(policy), WindowedTimer(), concurrency=6)
    logs = {}
    for ff in (True, False):
        logs[ff] = IterationLog(WindowedTimer(), len(reqs))
        logged = simulate(reqs, _engine(policy), WindowedTimer(), concurrency=6, log=logs[ff], fast_forward=ff)
        assert_same_records(bare, logged)
    fast, plain = logs[True].columns(), logs[False].columns()
    for c in fast:  # fast-forwarded decode runs are logged as the iterations plain stepping logs
        np.testing.assert_array_equal(fast[c], plain[c])
    assert fast["prefill_tokens"].sum() == sum(p for p, _ in lengths)  # no preemption here
    assert fast["decodes"].sum() == sum(o - 1 for _, o in lengths)
    assert np.all(fast["end_s"] > fast["start_s"]) and np.all(np.diff(fast["start_s"]) >= 0)
    assert fast["end_s"][-1] == max(r.finished_s for r in bare)
    hybrid = (fast["prefills"] > 0) & (fast["decodes"] > 0)
    assert np.all(np.isfinite(fast["alone_prefill_s"][hybrid])) and np.all(np.isnan(fast["alone_prefill_s"][~hybrid]))
    if policy in ("decode_maximal", "sarathi"):
        assert hybrid.any()
        # the parts alone cost less than together, and the decodes ride for less than they cost alone
        dt = fast["end_s"] - fast["start_s"]
        assert np.all(fast["alone_prefill_s"][hybrid] < dt[hybrid])
        assert np.all(dt[hybrid] - fast["alone_prefill_s"][hybrid] < fast["alone_decodes_s"][hybrid])
    if policy == "orca_worst":
        assert not hybrid.any()


class _Recording(HalfStageTimer):
    """HalfStageTimer with a send, noting every micro-batch's stage times."""

    def __init__(self, send):
        self.send, self.stages = send, []

    def stage_times(self, new_tokens, context_lens):
        out = super().stage_times(new_tokens, context_lens)
        self.stages.append(out.tolist())
        return out

    def pp_send_time(self, num_tokens):
        return self.send


@pytest.mark.parametrize("policy", ("decode_maximal", "orca_worst"))
@pytest.mark.parametrize("send", (0.0, 1e-3))
def test_pipeline_bubbles_are_the_stages_idle_time(policy, send):
    """Summed over micro-batches, the schedule bubbles are stage 0's idle time and the send +
    upstream bubbles the later stage's, from the start of the run to its last micro-batch."""
    rng = np.random.default_rng(4)
    lengths = [(int(p), int(o)) for p, o in zip(rng.integers(10, 300, 30), rng.integers(2, 100, 30))]
    timer = _Recording(send)
    log = IterationLog(timer, 30)
    simulate(_offline(lengths), _engine(policy), timer, pp=2, log=log)
    cols, stages = log.columns(), np.array(timer.stages)
    assert len(stages) == len(cols["start_s"])
    stage0_end = np.max(cols["start_s"] + stages[:, 0])
    assert np.nansum(cols["bubble_schedule_s"]) == pytest.approx(stage0_end - stages[:, 0].sum())
    later = np.nansum(cols["bubble_send_s"]) + np.nansum(cols["bubble_upstream_s"])
    assert later == pytest.approx(cols["end_s"].max() - stages[:, 1].sum())
    assert (np.nansum(cols["bubble_send_s"]) > 0) == (send > 0)
    per_request = log.request_bubbles()
    assert set(per_request) == {"bubble_schedule_s", "bubble_send_s", "bubble_upstream_s"}
    assert all(v.shape == (30,) and np.all(v >= 0) for v in per_request.values())
