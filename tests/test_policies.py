"""Policy invariants over randomized workloads (ARCHITECTURE.md, 'Policies, exactly')."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engines.core import Sequence, SequenceStatus
from engines.schedulers import EngineConfig, SchedulerConfig, make_engine, make_policy
from tests.policy_workloads import ALL_POLICIES, build, drive

MAX_LEN = 512
lengths_st = st.lists(
    st.tuples(st.integers(1, 300), st.integers(1, 200)).filter(lambda t: t[0] + t[1] - 1 <= MAX_LEN),
    min_size=1,
    max_size=40,
)
common = settings(max_examples=40, deadline=None)


def _kv_blocks_ok(engine):
    used = sum(len(s.block_table) for s in engine.running)
    assert used == engine.blocks.num_used <= engine.blocks.num_blocks
    for s in engine.running:
        # a running sequence's table covers what it has computed
        assert len(s.block_table) * engine.blocks.block_size >= s.num_computed


@common
@given(lengths=lengths_st, budget=st.integers(16, 600), max_seqs=st.integers(1, 16), kv=st.integers(512, 4096))
def test_sarathi_budget_and_no_decode_left_out(lengths, budget, max_seqs, kv):
    def check(engine, batch, running_before):
        decodes_before = [s for s in running_before if not s.is_prefill]
        in_batch = set(id(s) for s in batch.seqs)
        preempted = [s for s in decodes_before if s.status is SequenceStatus.WAITING]
        # every running decode is in the batch unless it was preempted for KV room
        for s in decodes_before:
            assert id(s) in in_batch or s in preempted
        # the budget bounds prefill tokens; decodes are never held back by it
        assert batch.num_prefill_tokens == 0 or batch.num_tokens <= budget
        _kv_blocks_ok(engine)

    engine = build("sarathi", budget, max_seqs, kv, MAX_LEN)
    _, produced = drive(engine, lengths, check)
    assert all(produced[i] == o for i, (_, o) in enumerate(lengths))
    assert engine.blocks.num_used == 0


@common
@given(lengths=lengths_st, max_seqs=st.integers(1, 16), kv=st.integers(512, 4096))
def test_vllm_never_mixes_prefill_and_decode(lengths, max_seqs, kv):
    def check(engine, batch, _):
        assert batch.is_decode_only or all(batch.is_prefill)
        if batch.has_prefill:  # whole prompts only
            assert all(n == s.prefill_target for s, n in zip(batch.seqs, batch.new_tokens))
        _kv_blocks_ok(engine)

    engine = build("vllm", 512, max_seqs, kv, MAX_LEN)
    _, produced = drive(engine, lengths, check)
    assert all(produced[i] == o for i, (_, o) in enumerate(lengths))


@common
@given(lengths=lengths_st, max_seqs=st.integers(1, 8), policy=st.sampled_from(["orca", "fastertransformer"]))
def test_reservation_policies_admit_whole_prompts_and_never_preempt(lengths, max_seqs, policy):
    kv = 8 * MAX_LEN

    def check(engine, batch, _):
        for s, n, p in zip(batch.seqs, batch.new_tokens, batch.is_prefill):
            if p:
                assert n == s.prompt_len and s.num_computed == 0
        assert len(engine.running) <= max_seqs
        # reservation: every running sequence holds blocks for max_model_len
        for s in engine.running:
            assert len(s.block_table) * engine.blocks.block_size >= MAX_LEN
        _kv_blocks_ok(engine)

    engine = build(policy, 512, max_seqs, kv, MAX_LEN)
    _, produced = drive(engine, lengths, check)
    assert all(produced[i] == o for i, (_, o) in enumerate(lengths))
    assert engine.num_preemptions == 0


@common
@given(lengths=lengths_st, max_seqs=st.integers(1, 16))
def test_fastertransformer_is_request_level(lengths, max_seqs):
    def check(engine, batch, running_before):
        if running_before:  # never admits while a batch is running
            assert batch.is_decode_only and set(map(id, batch.seqs)) == set(map(id, running_before))

    engine = build("fastertransformer", 512, max_seqs, 8 * MAX_LEN, MAX_LEN)
    drive(engine, lengths, check)


@common
@given(lengths=lengths_st, budget=st.integers(16, 600), kv=st.integers(512, 4096))
def test_chunked_only_never_mixes_and_respects_budget(lengths, budget, kv):
    def check(engine, batch, _):
        assert batch.is_decode_only or all(batch.is_prefill)
        if batch.has_prefill:
            assert batch.num_tokens <= budget
        _kv_blocks_ok(engine)

    engine = build("chunked_only", budget, 16, kv, MAX_LEN)
    _, produced = drive(engine, lengths, check)
    assert all(produced[i] == o for i, (_, o) in enumerate(lengths))


@common
@given(lengths=lengths_st, budget=st.integers(16, 600))
def test_hybrid_only_never_chunks(lengths, budget):
    def check(engine, batch, _):
        for s, n, p in zip(batch.seqs, batch.new_tokens, batch.is_prefill):
            if p:
                assert s.num_computed == 0 and n == s.prefill_target

    engine = build("hybrid_only", budget, 16, 4096, MAX_LEN)
    _, produced = drive(engine, lengths, check)
    assert all(produced[i] == o for i, (_, o) in enumerate(lengths))


@common
@given(lengths=lengths_st, policy=st.sampled_from(ALL_POLICIES), kv=st.integers(512, 2048))
def test_every_request_gets_exactly_its_output_and_blocks_return(lengths, policy, kv):
    kv = max(kv, MAX_LEN) if policy not in ("orca", "fastertransformer") else 4 * MAX_LEN
    engine = build(policy, 128, 8, kv, MAX_LEN)
    _, produced = drive(engine, lengths, lambda e, b, r: _kv_blocks_ok(e))
    assert produced == {i: o for i, (_, o) in enumerate(lengths)}
    assert engine.blocks.num_used == 0 and not engine.running and not engine.waiting


def test_preemption_by_recompute_keeps_tokens_and_reprefills():
    # Tiny KV: 4 blocks of 16 tokens; two sequences that together outgrow it.
    engine = build("vllm", 512, 4, 64, 64)
    batches, produced = drive(engine, [(16, 30), (16, 30)])
    assert produced == {0: 30, 1: 30}
    assert engine.num_preemptions >= 1
    # the recompute prefill covers prompt + generated tokens
    prefills = [n for b in batches for n, p in zip(b.new_tokens, b.is_prefill) if p]
    assert prefills[:2] == [16, 16] and any(n > 16 for n in prefills[2:])


def test_unknown_policy_and_bad_settings():
    with pytest.raises(ValueError, match="unknown scheduler policy"):
        SchedulerConfig("fcfs")
    with pytest.raises(ValueError, match="max_num_seqs must be >= 1"):
        make_policy(SchedulerConfig("sarathi", max_num_seqs=0), max_model_len=512)
    with pytest.raises(ValueError, match="policy orca has no knob 'token_budget'; its knobs: max_num_seqs"):
        SchedulerConfig("orca", token_budget=512)
    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        make_policy(SchedulerConfig("vllm", max_num_batched_tokens=100), max_model_len=512)
    with pytest.raises(ValueError, match="cannot hold one sequence"):
        make_engine(EngineConfig(SchedulerConfig("orca"), kv_capacity_tokens=100, max_model_len=512))


def test_request_longer_than_model_is_rejected():
    engine = build("sarathi", 512, 8, 4096, 512)
    with pytest.raises(ValueError, match="exceed max_model_len"):
        engine.add(Sequence(0, 500, 100))


def test_abort_frees_blocks():
    engine = build("sarathi", 64, 8, 4096, 512)
    for i in range(3):
        engine.add(Sequence(i, 100, 50))
    b = engine.schedule()
    engine.complete(b)
    for i in range(3):
        engine.abort(i)
    assert engine.blocks.num_used == 0 and not engine.has_unfinished
