"""The engine core's prefix cache (engines/core/prefix_cache.py): hits, eviction, preemption, and
block books that balance under every policy (hypothesis)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engines.core import PrefixCachingBlockManager, Segments, Sequence, TokenIds
from engines.schedulers import EngineConfig, SchedulerConfig, make_engine
from tests.policy_workloads import ALL_POLICIES

BS = 16


def _engine(policy="sarathi", kv_tokens=4096, max_len=1024, budget=512, max_seqs=16):
    cfg = SchedulerConfig.shared(policy, max_num_seqs=max_seqs, token_budget=budget,
                                 max_num_batched_tokens=budget)  # each policy's own budget knob, where it has one
    return make_engine(EngineConfig(cfg, kv_tokens, max_len, BS, prefix_caching=True))


def _seq(i, runs, output_len):
    prompt = sum(n for _, n in runs)
    return Sequence(i, prompt, output_len, Segments(tuple(runs) + ((10_000 + i, output_len),), BS))


def _run(engine, seqs):
    for s in seqs:
        engine.add(s)
    batches = []
    while engine.has_unfinished:
        batch = engine.schedule()
        assert batch is not None
        batches.append(batch)
        engine.complete(batch)
    return batches


def test_off_by_default_and_the_plain_engine_when_off():
    engine = make_engine(EngineConfig(SchedulerConfig("sarathi"), 4096, 1024, BS))
    assert type(engine.blocks).__name__ == "BlockManager"


def test_a_shared_prefix_is_computed_once_and_the_last_token_always():
    engine = _engine()
    a = _seq(0, [(1, 100)], 3)
    _run(engine, [a])
    b = _seq(1, [(1, 100), (2, 40)], 2)  # 100 shared tokens: 6 full blocks
    c = _seq(2, [(1, 96)], 2)  # its whole prompt cached (6 blocks): still computes its last token
    batches = _run(engine, [b, c])
    first = {s.seq_id: (n, ctx) for batch in batches for s, n, ctx in zip(batch.seqs, batch.new_tokens, batch.context_lens)
             if ctx == s.cached_tokens and n > 1 or s.prompt_len - s.cached_tokens == n}
    assert b.cached_tokens == 96 and first[1] == (44, 96)
    assert c.cached_tokens == 80 and first[2] == (16, 80)  # (96 - 1) // 16 = 5 blocks, not 6
    s = engine.blocks.stats
    assert (s.queries, s.hits, s.hit_blocks) == (100 + 140 + 96, 96 + 80, 11)


def test_generated_tokens_are_cached_and_the_next_turn_finds_them():
    engine = _engine()
    turn1 = Sequence(0, 40, 30, Segments(((1, 40), (2, 30)), BS))  # output segment 2
    _run(engine, [turn1])
    # the next turn's prompt: turn 1's prompt, its answer (computed up to its last token), a new message
    turn2 = Sequence(1, 80, 5, Segments(((1, 40), (2, 30), (3, 10), (4, 5)), BS))
    _run(engine, [turn2])
    assert turn2.cached_tokens == 64  # 69 tokens computed in turn 1: 4 full blocks


def test_eviction_is_lru_tail_first_and_never_takes_a_used_block():
    engine = _engine(kv_tokens=1024)  # 64 blocks
    blocks: PrefixCachingBlockManager = engine.blocks
    a = _seq(0, [(1, 320)], 1)  # 20 blocks, cached after it finishes
    _run(engine, [a])
    assert blocks.num_evictable == 20 and blocks.num_free == 64
    big = _seq(1, [(2, 54 * 16)], 1)  # needs 54 blocks: 44 free + 10 evicted, a's tail first
    _run(engine, [big])
    again = _seq(2, [(1, 320)], 1)
    _run(engine, [again])
    assert again.cached_tokens == 10 * 16 and blocks.stats.evictions >= 10


def test_a_preempted_sequence_finds_its_own_blocks_again():
    engine = _engine("vllm", kv_tokens=64 * 16, max_len=1024, budget=1024, max_seqs=4)
    seqs = [_seq(i, [(i + 1, 200)], 400) for i in range(4)]  # 4 x (200 + 400) tokens > 64 blocks
    _run(engine, seqs)
    assert engine.num_preemptions > 0
    assert engine.blocks.stats.hits > 0  # readmissions found their prefix
    assert engine.blocks.num_free == engine.blocks.num_blocks and engine.blocks.num_used == 0


def test_token_ids_and_segments_hash_blocks_by_content():
    a = TokenIds(range(40), BS)
    b = TokenIds(list(range(35)) + [99] * 5, BS)
    assert a.block_hash(0) == b.block_hash(0) and a.block_hash(1) == b.block_hash(1)
    with pytest.raises(IndexError):
        a.block_hash(2)
    s = Segments(((7, 10), (8, 30)), BS)
    t = Segments(((7, 10), (8, 20), (9, 5)), BS)
    u = Segments(((7, 10), (0, 0), (8, 30)), BS)  # an empty run changes nothing
    assert s.block_hash(0) == t.block_hash(0) and s.block_hash(1) != t.block_hash(1)
    assert [u.block_hash(i) for i in range(2)] == [s.block_hash(i) for i in range(2)]


# -- the books balance and a hit is always the sequence's own content -------------------------------------
def _drive_checked(engine, seqs):
    """Step to the end; after every iteration audit the block books and check that every full
    computed block a running sequence holds has that sequence's content (a shadow of what was
    written where)."""
    blocks: PrefixCachingBlockManager = engine.blocks
    content: dict[int, int] = {}  # physical block -> the chain hash of the tokens written into it
    for s in seqs:
        engine.add(s)
    produced = {s.seq_id: 0 for s in seqs}
    for _ in range(100_000):
        if not engine.has_unfinished:
            break
        for seq in engine.waiting:  # can_admit's shortcut says what the plain rule says, in every state
            if not seq.block_table and seq.num_computed < seq.prefill_target:
                exact = blocks.num_free - blocks.admission_blocks(seq) >= blocks.watermark_blocks
                assert blocks.can_admit(seq) == exact
        batch = engine.schedule()
        assert batch is not None, "stalled"
        # Blocks this iteration fills are written before any attention reads them (each layer writes
        # the batch's KV, then attends), so a hit may be one filled in this very iteration: vLLM V1
        # caches a chunk's blocks when it allocates them, and vllm_v1 does as it does.
        for seq, n, ctx in zip(batch.seqs, batch.new_tokens, batch.context_lens):
            for i in range(ctx // BS, (ctx + n) // BS):
                content[seq.block_table[i]] = seq.tokens.block_hash(i)
        for seq in batch.seqs:  # what a hit reuses must hold exactly this sequence's tokens
            for i in range(seq.num_computed // BS):
                assert content.get(seq.block_table[i]) == seq.tokens.block_hash(i)
        out = engine.complete(batch)
        for s in out.produced:
            produced[s.seq_id] += 1
        blocks.audit([s.block_table for s in engine.running])
    assert not engine.has_unfinished
    assert blocks.num_free == blocks.num_blocks
    return produced


conversations = st.lists(  # each request: which of a few shared heads, its own tail, output
    st.tuples(st.integers(0, 3), st.integers(0, 120), st.integers(1, 80), st.integers(1, 60)),
    min_size=1, max_size=24)


@settings(max_examples=60, deadline=None)
@given(policy=st.sampled_from(ALL_POLICIES), reqs=conversations, kv_blocks=st.integers(40, 200),
       budget=st.integers(16, 300), max_seqs=st.integers(1, 8), echo=st.booleans())
def test_books_balance_and_hits_hold_the_right_tokens(policy, reqs, kv_blocks, budget, max_seqs, echo):
    max_len = 512
    engine = _engine(policy, kv_blocks * BS, max_len, max(budget, max_len) if policy == "vllm" else budget, max_seqs)
    seqs, history = [], []
    for i, (head, head_len, tail, out) in enumerate(reqs):
        runs = [(1000 + head, head_len)] if head_len else []
        if echo and history:  # the previous request's prompt and answer, as a conversation's next turn
            runs = list(history[-1])
        runs.append((2000 + i, tail))
        runs = runs[-6:]
        prompt = sum(n for _, n in runs)
        if prompt + out - 1 > max_len:
            continue
        seq = Sequence(i, prompt, out, Segments(tuple(runs) + ((3000 + i, out),), BS))
        seqs.append(seq)
        history.append(tuple(runs) + ((3000 + i, out),))
    produced = _drive_checked(engine, seqs)
    assert all(produced[s.seq_id] == s.output_len for s in seqs)


def test_can_admit_counts_unused_hits_when_room_is_short():
    """can_admit skips counting the hits no one uses when there is room for all of them; when
    there is not, it counts, and says what num_free - admission_blocks >= watermark says."""
    blocks = PrefixCachingBlockManager(8, BS, 0.0)
    a = Sequence(0, 64, 1, Segments(((1, 64), (2, 1)), BS))
    blocks.admit(a)
    a.num_computed = 64
    blocks.free(a)  # its 4 blocks cached and evictable, 4 free
    other = Sequence(1, 48, 1, Segments(((3, 48), (4, 1)), BS))
    blocks.admit(other)  # 3 of the free blocks: 1 free + 4 evictable left
    turn = Sequence(2, 104, 1, Segments(((1, 64), (5, 40), (6, 1)), BS))  # 4 hits, 3 fresh blocks
    assert len(blocks.lookup(turn)) == 4 and blocks.admission_blocks(turn) == 7 and blocks.num_free == 5
    assert not blocks.can_admit(turn)  # room for 2 more: the 4 unused hits count
    holder = Sequence(3, 80, 1, Segments(((1, 64), (7, 16), (8, 1)), BS))
    blocks.admit(holder)  # uses the 4 cached blocks and the free one: nothing free, the hits in use
    assert blocks.num_free == 0 and blocks.admission_blocks(turn) == 3 and not blocks.can_admit(turn)
    blocks.free(other)  # 3 free again: exactly room for the turn's fresh blocks, its hits are used
    assert blocks.num_free == 3 and blocks.can_admit(turn)
