"""Pipeline-parallel simulation: the fast-forward replay equals plain stepping, bit for bit."""
from __future__ import annotations

import os

import numpy as np
import pytest
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


class ConstantStageTimer:
    """Every micro-batch takes `stages[s]` seconds on stage s and `send` seconds per hop, whatever
    its size: token times can be worked out by hand."""

    def __init__(self, stages, send: float) -> None:
        self.stages = np.asarray(stages, dtype=np.float64)
        self.send = send

    def stage_times(self, new_tokens, context_lens):
        shape = np.shape(new_tokens)[:-1] + self.stages.shape
        return np.broadcast_to(self.stages, shape).copy()

    def batch_times(self, new_tokens, context_lens):
        return np.max(self.stage_times(new_tokens, context_lens), axis=-1)

    def pp_send_time(self, num_tokens):
        return self.send


@pytest.mark.parametrize("fast_forward", [False, True])
@pytest.mark.parametrize("policy", ["sarathi", "vllm", "orca"])
def test_a_stage_runs_one_micro_batch_at_a_time_by_hand(policy, fast_forward):
    # pp=2, stage 0 takes 1 s, stage 1 takes 3 s, a hop 0.5 s. A (prompt 4, 3 tokens) arrives at
    # 0, B (prompt 4, 2 tokens) at 0.25. Stage 1 is the bottleneck, so B waits for it:
    #   A prefill: s0 0-1,       s1 1.5-4.5               -> A token 1 at 4.5
    #   B prefill: s0 1-2,       s1 max(2.5, 4.5)-7.5     -> B token 1 at 7.5
    #   A decode:  s0 4.5-5.5,   s1 max(6, 7.5)-10.5      -> A token 2 at 10.5
    #   B decode:  s0 7.5-8.5,   s1 max(9, 10.5)-13.5     -> B token 2 at 13.5 (B done)
    #   A decode:  s0 10.5-11.5, s1 max(12, 13.5)-16.5    -> A token 3 at 16.5 (A done)
    # (A stage that took two micro-batches at once would give B its first token at 5.5.)
    reqs = [RequestSpec(0, 0.0, 4, 3), RequestSpec(1, 0.25, 4, 2)]
    a, b = simulate(reqs, build(policy, 128, 8, 4096, MAX_LEN), ConstantStageTimer([1.0, 3.0], 0.5), pp=2,
                    fast_forward=fast_forward)
    assert a.token_times_s.tolist() == [4.5, 10.5, 16.5]
    assert b.token_times_s.tolist() == [7.5, 13.5]
    assert (a.first_scheduled_s, a.finished_s) == (0.0, 16.5)
    assert (b.first_scheduled_s, b.finished_s) == (1.0, 13.5)


@pytest.mark.parametrize("fast_forward", [False, True])
@pytest.mark.parametrize("pp", [2, 4])
@pytest.mark.parametrize("policy", ALL_POLICIES)
def test_the_last_stage_never_overlaps_two_micro_batches(policy, pp, fast_forward):
    # Invariant: with a constant last-stage time that is the bottleneck, every micro-batch ends
    # a busy interval of exactly that length on the last stage, and the stage runs one at a
    # time, so distinct completion times (token times) are at least that far apart.
    last = 4e-3
    stages = [1e-3, 2.5e-3, 1.5e-3, last][-pp:]
    rng = np.random.default_rng(11)
    lengths = [(int(p), int(o)) for p, o in zip(rng.integers(5, 200, 40), rng.integers(5, 120, 40))]
    reqs = _requests(lengths, 150.0, 12, burst=0.3)
    kv = 4096 if policy not in ("orca", "fastertransformer") else 8 * MAX_LEN
    records = simulate(reqs, build(policy, 64, 8, kv, MAX_LEN), ConstantStageTimer(stages, 2e-4), pp=pp,
                       fast_forward=fast_forward)
    assert all(r.error is None and len(r.token_times_s) == r.output_len for r in records)
    ends = np.unique(np.concatenate([r.token_times_s for r in records]))
    assert len(ends) > 100
    assert np.min(np.diff(ends)) >= last * (1 - 1e-9), np.min(np.diff(ends))
