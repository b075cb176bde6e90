"""The first Sarathi paper's policies in the engine core (engines/schedulers/decode_maximal.py):
decode-maximal batches (one prefill chunk + every running decode, at most B sequences, the chunk
cut to whole tiles), Orca's best case (whole prompts riding with the decodes, one a batch) and
worst case (prefill-only or decode-only batches); their batch size B is refused unless B
sequences of max_model_len fit the KV cache; the simulator's fast-forward is exact under them."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engines.schedulers import EngineConfig, SchedulerConfig, make_engine, make_policy
from harness.backends.sim import simulate
from tests.policy_workloads import drive
from tests.sim_checks import assert_same_records
from tests.test_sim import HalfStageTimer, WindowedTimer, _requests

MAX_LEN = 512
NEW = ("decode_maximal", "orca_best", "orca_worst")


def _engine(policy, b=6, chunk=256, tile=0, kv=None, max_len=MAX_LEN):
    cfg = SchedulerConfig.shared(policy, max_num_seqs=b, chunk_size=chunk, tile_tokens=tile)
    return make_engine(EngineConfig(cfg, kv or b * max_len, max_len))


def test_decode_maximal_batches_hold_one_chunk_and_every_decode():
    b, chunk = 6, 64
    lengths = [(320, 26)] * 20  # P / C = 5 chunks, D / (B - 1) = 5 iterations: the P:D where every decode rides

    def check(engine, batch, running_before):
        prefills = [n for n, p in zip(batch.new_tokens, batch.is_prefill) if p]
        assert len(prefills) <= 1 and len(batch) <= b
        assert all(n <= chunk for n in prefills)
        # every running decode rides along (none held back)
        decoding = {s.seq_id for s in running_before if not s.is_prefill}
        assert decoding <= {s.seq_id for s in batch.seqs}

    batches, produced = drive(_engine("decode_maximal", b, chunk), lengths, check)
    assert produced == {i: 26 for i in range(20)}
    hybrid = [x for x in batches if x.has_prefill and x.num_decodes == b - 1]
    assert len(hybrid) > len(batches) // 2  # the steady state: a chunk with B - 1 decodes


def test_tile_alignment_cuts_the_chunk_to_256_minus_decodes():
    """C = 256, tiles of 128: a chunk with d decodes is 256 - d tokens (the paper's 256 - (B - 1)),
    unless it is the prompt's last and shorter; without decodes it is the nominal C."""
    b, prompt = 18, 768
    batches, _ = drive(_engine("decode_maximal", b, 256, tile=128, max_len=1024), [(prompt, 200)] * 40)
    for x in batches:
        (c, n), = [(c, n) for c, n, p in zip(x.context_lens, x.new_tokens, x.is_prefill) if p] or [(None, None)]
        if n is not None and c + n < prompt:  # not the prompt's last chunk
            assert n + x.num_decodes == 256
    assert any(x.num_prefill_tokens == 256 - (b - 1) for x in batches)
    assert batches[0].num_prefill_tokens == 256 and batches[0].num_decodes == 0


def test_the_policy_and_the_model_cut_chunks_alike():
    """The tile rule lives twice (the policy may not import the performance model): both agree."""
    from engines.core import Sequence
    from engines.perf.queries import tile_aligned_chunk
    from engines.schedulers.decode_maximal import DecodeMaximalPolicy

    for chunk in (64, 128, 256, 512):
        for tile in (0, 64, 128):
            policy = DecodeMaximalPolicy(32, chunk, tile)
            for d in range(0, 31):
                assert policy.chunk(Sequence(0, 4096, 2), d) == tile_aligned_chunk(chunk, d, tile)


def test_orca_best_mixes_one_whole_prompt_and_orca_worst_never_mixes():
    lengths = [(150, 30)] * 12

    def best(engine, batch, _):
        prefills = [(s, n) for s, n, p in zip(batch.seqs, batch.new_tokens, batch.is_prefill) if p]
        assert len(prefills) <= 1 and all(s.num_computed == 0 and n == s.prompt_len for s, n in prefills)

    def worst(engine, batch, _):
        assert batch.is_decode_only or not batch.num_decodes
        assert all(n == s.prompt_len for s, n, p in zip(batch.seqs, batch.new_tokens, batch.is_prefill) if p)

    for policy, check in (("orca_best", best), ("orca_worst", worst)):
        batches, produced = drive(_engine(policy, 4), lengths, check)
        assert produced == {i: 30 for i in range(12)}
    assert any(x.has_prefill and x.num_decodes for x in drive(_engine("orca_best", 4), lengths)[0])


@pytest.mark.parametrize("policy", NEW)
def test_a_batch_size_that_does_not_fit_memory_is_refused(policy):
    cfg = SchedulerConfig(policy, max_num_seqs=9)
    with pytest.raises(ValueError, match="does not fit the KV cache: 8 sequences"):
        make_engine(EngineConfig(cfg, 8 * MAX_LEN + 100, MAX_LEN))
    make_engine(EngineConfig(SchedulerConfig(policy, max_num_seqs=8), 8 * MAX_LEN, MAX_LEN))


def test_bad_chunk_and_tile_settings():
    with pytest.raises(ValueError, match="chunk_size must be >= 1"):
        make_policy(SchedulerConfig("decode_maximal", chunk_size=0), MAX_LEN)
    with pytest.raises(ValueError, match="tile_tokens"):
        make_policy(SchedulerConfig("decode_maximal", tile_tokens=-1), MAX_LEN)


lengths_st = st.lists(
    st.tuples(st.integers(1, 300), st.integers(1, 200)).filter(lambda t: t[0] + t[1] - 1 <= MAX_LEN),
    min_size=1, max_size=50)


@settings(max_examples=30, deadline=None)
@given(lengths=lengths_st, policy=st.sampled_from(NEW), rate=st.floats(1.0, 400.0), b=st.integers(1, 8),
       chunk=st.integers(16, 300), tile=st.sampled_from([0, 32, 128]), seed=st.integers(0, 1000))
def test_fast_forward_equals_plain_stepping(lengths, policy, rate, b, chunk, tile, seed):
    reqs = _requests(lengths, rate, seed)
    plain = simulate(reqs, _engine(policy, b, chunk, tile), WindowedTimer(), fast_forward=False)
    fast = simulate(reqs, _engine(policy, b, chunk, tile), WindowedTimer(), fast_forward=True)
    assert_same_records(plain, fast)


@pytest.mark.parametrize("policy", NEW)
def test_pipeline_parallel_completes_every_request(policy):
    rng = np.random.default_rng(3)
    lengths = [(int(p), int(o)) for p, o in zip(rng.integers(1, 300, 60), rng.integers(1, 150, 60))]
    reqs = _requests(lengths, 80.0, 4)
    for ff in (False, True):
        records = simulate(reqs, _engine(policy, 8, 64, 32), HalfStageTimer(), pp=2, fast_forward=ff)
        for spec, r in zip(reqs, records):
            assert r.completed and len(r.token_times_s) == spec.output_len
            assert np.all(np.diff(r.token_times_s) > 0)
