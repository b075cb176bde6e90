"""Pipeline-parallel simulation: the fast-forward replay equals plain stepping, bit for bit."""
from __future__ import annotations

import os

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from engines.core import Sequence
from harness.backends.sim import simulate
from harness.records import RequestSpec
from tests.policy_workloads import ALL_POLICIES, build

MAX_LEN = 512


class StageTimer:
    """`pp` unequal stages (the first carries an embedding term, the last a per-sequence head and a
    fixed overhead), a context-window non-linearity, a float sum over the batch whose rounding
    depends on the order of its rows, and a send time that grows with tokens: a replay that
    reordered a batch or any addition would be caught."""

    def __init__(self, pp: int, first_heavy: bool = False) -> None:
        self.pp = pp
        self.weights = np.linspace(0.7, 1.3, pp)[::-1 if first_heavy else 1] / pp

    def _layer(self, new, ctx):
        new = np.asarray(new, dtype=np.int64)
        ctx = np.asarray(ctx, dtype=np.int64)
        attn = np.sum(np.where(new > 0, np.minimum(ctx, 300) * new, 0), axis=-1)
        # A float sum whose rounding depends on the order of the batch rows.
        rows = np.sum(np.where(new > 0, np.sqrt(ctx + 1.0) * 1.3e-5 + np.cbrt(new + 0.5) * 2.1e-6, 0.0), axis=-1)
        seqs = np.count_nonzero(new, axis=-1)
        return 1.1e-3 + 3.3e-5 * np.sum(new, axis=-1) + 1.7e-8 * attn + rows, seqs, np.sum(new, axis=-1)

    def stage_times(self, new_tokens, context_lens):
        layer, seqs, tokens = self._layer(new_tokens, context_lens)
        stages = [w * layer for w in self.weights]
        stages[0] = stages[0] + 3.1e-7 * tokens
        stages[-1] = stages[-1] + 7.3e-6 * seqs + 4.1e-4
        return np.stack(stages, axis=-1)

    def batch_times(self, new_tokens, context_lens):
        return np.max(self.stage_times(new_tokens, context_lens), axis=-1)

    def pp_send_time(self, num_tokens):
        return 1.3e-4 + 2.9e-7 * num_tokens


def _requests(lengths, rate, seed, burst=0.0):
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1 / rate, len(lengths))
    if burst:  # some requests arrive together, so micro-batches form and merge unevenly
        gaps[rng.random(len(lengths)) < burst] = 0.0
    t = np.cumsum(gaps)
    return [RequestSpec(i, float(t[i]), p, o) for i, (p, o) in enumerate(lengths)]


def _same(plain, fast):
    for a, b in zip(plain, fast):
        assert a.request_id == b.request_id
        np.testing.assert_array_equal(a.token_times_s, b.token_times_s)
        np.testing.assert_array_equal([a.first_scheduled_s, a.finished_s], [b.first_scheduled_s, b.finished_s])
        assert (a.num_preemptions, a.error) == (b.num_preemptions, b.error)


lengths_st = st.lists(
    st.tuples(st.integers(1, 300), st.integers(1, 200)).filter(lambda t: t[0] + t[1] - 1 <= MAX_LEN),
    min_size=1,
    max_size=60,
)


# SIM_PP_EXAMPLES=1000 for a thorough local run (CI: 40).
@settings(max_examples=int(os.environ.get("SIM_PP_EXAMPLES", 40)), deadline=None)
@given(
    lengths=lengths_st,
    policy=st.sampled_from(ALL_POLICIES),
    pp=st.sampled_from([2, 4]),
    rate=st.floats(0.5, 400.0),
    burst=st.sampled_from([0.0, 0.3]),
    kv=st.sampled_from([1024, 2048, 8192]),
    budget=st.sampled_from([4, 16, 128]),
    max_seqs=st.sampled_from([2, 8, 32]),
    limit=st.sampled_from([None, None, 0.5, 3.0]),
    first_heavy=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_pipelined_fast_forward_equals_plain_stepping(lengths, policy, pp, rate, burst, kv, budget, max_seqs, limit,
                                                      first_heavy, seed):
    kv = kv if policy not in ("orca", "fastertransformer") else max(kv, 4 * MAX_LEN)
    reqs = _requests(lengths, rate, seed, burst)
    timer = StageTimer(pp, first_heavy)
    run = lambda ff: simulate(reqs, build(policy, budget, max_seqs, kv, MAX_LEN), timer, pp=pp,
                              fast_forward=ff, time_limit_s=limit)
    _same(run(False), run(True))


def test_pipelined_fast_forward_replays_most_launches():
    # Low load, long outputs: almost every launch is a replayed decode.
    rng = np.random.default_rng(5)
    lengths = [(int(p), int(o)) for p, o in zip(rng.integers(10, 200, 40), rng.integers(100, 300, 40))]
    reqs = _requests(lengths, 3.0, 6)
    for pp in (2, 4):
        stats: dict[str, int] = {}
        plain = simulate(reqs, build("sarathi", 128, 32, 8192, MAX_LEN), StageTimer(pp), pp=pp, fast_forward=False)
        fast = simulate(reqs, build("sarathi", 128, 32, 8192, MAX_LEN), StageTimer(pp), pp=pp, stats=stats)
        _same(plain, fast)
        assert stats["replayed_launches"] > 5 * stats["plain_launches"], stats


def test_pipelined_fast_forward_leaves_engine_as_plain_stepping():
    # The engine's state after a time limit (mid-run, groups in flight) matches plain stepping.
    rng = np.random.default_rng(8)
    lengths = [(int(p), int(o)) for p, o in zip(rng.integers(10, 300, 50), rng.integers(50, 200, 50))]
    reqs = _requests(lengths, 20.0, 9)
    for policy in ALL_POLICIES:
        states = []
        for ff in (False, True):
            engine = build(policy, 64, 16, 2048 if policy not in ("orca", "fastertransformer") else 4096, MAX_LEN)
            simulate(reqs, engine, StageTimer(2), pp=2, fast_forward=ff, time_limit_s=2.0)
            states.append(sorted(
                (s.seq_id, s.status.value, s.num_computed, s.num_generated, len(s.block_table), s.in_flight)
                for s in list(engine.running) + list(engine.waiting)) + [engine.blocks.num_free, engine.num_preemptions])
        assert states[0] == states[1], policy
