"""The simulated backend: exact fast-forward, token accounting, determinism, time limits."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.backends.sim import simulate
from harness.records import RequestSpec
from tests.policy_workloads import ALL_POLICIES, build

MAX_LEN = 512


class WindowedTimer:
    """A monotone iteration cost with a per-sequence non-linearity (a context window), so a
    fast-forward that only tracked summed context would be caught."""

    def batch_times(self, new_tokens, context_lens):
        new = np.asarray(new_tokens, dtype=np.int64)
        ctx = np.asarray(context_lens, dtype=np.int64)
        active = new > 0
        attn = np.sum(np.where(active, np.minimum(ctx, 300) * new, 0), axis=-1)
        return 2e-3 + 3e-5 * np.sum(new, axis=-1) + 1e-8 * attn

    def pp_send_time(self, num_tokens):
        return 0.0


class HalfStageTimer(WindowedTimer):
    """WindowedTimer's model split into two equal pipeline stages, with a free send."""

    def stage_times(self, new_tokens, context_lens):
        half = self.batch_times(new_tokens, context_lens) / 2
        return np.stack([half, half], axis=-1)


def _requests(lengths, rate, seed):
    gaps = np.random.default_rng(seed).exponential(1 / rate, len(lengths))
    t = np.cumsum(gaps)
    return [RequestSpec(i, float(t[i]), p, o) for i, (p, o) in enumerate(lengths)]


lengths_st = st.lists(
    st.tuples(st.integers(1, 300), st.integers(1, 200)).filter(lambda t: t[0] + t[1] - 1 <= MAX_LEN),
    min_size=1,
    max_size=60,
)


@settings(max_examples=40, deadline=None)
@given(
    lengths=lengths_st,
    policy=st.sampled_from(ALL_POLICIES),
    rate=st.floats(1.0, 400.0),
    kv=st.sampled_from([1024, 2048, 8192]),
    seed=st.integers(0, 1000),
)
def test_fast_forward_equals_plain_stepping(lengths, policy, rate, kv, seed):
    kv = kv if policy not in ("orca", "fastertransformer") else max(kv, 4 * MAX_LEN)
    reqs = _requests(lengths, rate, seed)
    plain = simulate(reqs, build(policy, 128, 8, kv, MAX_LEN), WindowedTimer(), fast_forward=False)
    fast = simulate(reqs, build(policy, 128, 8, kv, MAX_LEN), WindowedTimer(), fast_forward=True)
    for a, b in zip(plain, fast):
        assert a.request_id == b.request_id
        np.testing.assert_array_equal(a.token_times_s, b.token_times_s)
        assert (a.first_scheduled_s, a.finished_s, a.num_preemptions) == (b.first_scheduled_s, b.finished_s, b.num_preemptions)


@pytest.mark.parametrize("policy", ALL_POLICIES)
def test_token_accounting_and_times(policy):
    rng = np.random.default_rng(1)
    lengths = [(int(p), int(o)) for p, o in zip(rng.integers(1, 300, 80), rng.integers(1, 200, 80))]
    reqs = _requests(lengths, 50.0, 2)
    records = simulate(reqs, build(policy, 256, 16, 4 * MAX_LEN, MAX_LEN), WindowedTimer())
    for spec, r in zip(reqs, records):
        assert r.completed and len(r.token_times_s) == spec.output_len
        assert np.all(np.diff(r.token_times_s) > 0)
        assert spec.arrival_s <= r.first_scheduled_s < r.first_token_s == r.token_times_s[0]
        assert r.finished_s == r.token_times_s[-1]


def test_same_seed_identical_records():
    lengths = [(200, 50)] * 30 + [(17, 120)] * 30
    reqs = _requests(lengths, 30.0, 7)
    a = simulate(reqs, build("sarathi", 128, 16, 4096, MAX_LEN), WindowedTimer())
    b = simulate(reqs, build("sarathi", 128, 16, 4096, MAX_LEN), WindowedTimer())
    assert all(np.array_equal(x.token_times_s, y.token_times_s) for x, y in zip(a, b))


def test_records_keep_input_order_for_unsorted_arrivals():
    reqs = [RequestSpec(10, 0.5, 20, 5), RequestSpec(11, 0.1, 20, 5)]
    records = simulate(reqs, build("sarathi", 128, 16, 4096, MAX_LEN), WindowedTimer())
    assert [r.request_id for r in records] == [10, 11]
    assert records[1].first_scheduled_s == pytest.approx(0.1)


def test_time_limit_reports_unfinished_and_unstarted():
    reqs = [RequestSpec(i, 0.0, 300, 200) for i in range(40)]
    records = simulate(reqs, build("orca", 128, 2, 4 * MAX_LEN, MAX_LEN), WindowedTimer(), time_limit_s=0.5)
    assert len(records) == 40
    unstarted = [r for r in records if not r.started]
    assert unstarted and all(r.error == "unfinished at time limit" for r in unstarted)
    assert all(np.isnan(r.first_token_s) for r in unstarted)


def test_sarathi_bounds_stalls_that_vllm_suffers():
    # One long decode running while long prompts arrive: vLLM stalls it behind whole prefills,
    # Sarathi piggybacks chunks so its gaps stay near one budget-sized iteration.
    reqs = [RequestSpec(0, 0.0, 10, 150)] + [RequestSpec(i, 0.05 * i, 500, 2) for i in range(1, 8)]
    gaps = {}
    for policy in ("sarathi", "vllm"):
        r = simulate(reqs, build(policy, 64, 16, 8192, MAX_LEN), WindowedTimer())[0]
        gaps[policy] = np.max(np.diff(r.token_times_s))
    assert gaps["sarathi"] < gaps["vllm"]


@pytest.mark.parametrize("policy", ALL_POLICIES)
def test_pipeline_parallel_completes_every_request(policy):
    rng = np.random.default_rng(3)
    lengths = [(int(p), int(o)) for p, o in zip(rng.integers(1, 300, 60), rng.integers(1, 150, 60))]
    reqs = _requests(lengths, 80.0, 4)
    records = simulate(reqs, build(policy, 256, 16, 4 * MAX_LEN, MAX_LEN), HalfStageTimer(), pp=2)
    for spec, r in zip(reqs, records):
        assert r.completed and len(r.token_times_s) == spec.output_len
        assert np.all(np.diff(r.token_times_s) > 0)


def test_pipeline_single_request_latency_equals_unpipelined():
    # Alone, a request cannot use the second micro-batch slot: each token crosses both stages.
    reqs = [RequestSpec(0, 0.0, 100, 20)]
    one = simulate(reqs, build("sarathi", 512, 8, 4096, MAX_LEN), WindowedTimer())[0]
    two = simulate(reqs, build("sarathi", 512, 8, 4096, MAX_LEN), HalfStageTimer(), pp=2)[0]
    np.testing.assert_allclose(one.token_times_s, two.token_times_s)


def test_pipeline_overlaps_micro_batches():
    # Requests arriving while others are in flight form a second micro-batch, so two stages
    # working at once finish the work sooner. (Requests that all arrive together would join one
    # micro-batch and keep it: a greedy scheduler cannot split a batch whose sequences are in flight.)
    reqs = [RequestSpec(i, 0.001 * i, 50, 100) for i in range(32)]
    one = simulate(reqs, build("sarathi", 512, 32, 8192, MAX_LEN), WindowedTimer())
    two = simulate(reqs, build("sarathi", 512, 32, 8192, MAX_LEN), HalfStageTimer(), pp=2)
    end = lambda rs: max(r.finished_s for r in rs)
    assert end(two) < 0.9 * end(one)
