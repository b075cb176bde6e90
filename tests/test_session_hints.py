"""A session's next turn continues its previous turn's tokens (engines/core/tokens.py `after`,
prefix_cache.py's hint): the same hashes as tokens built afresh, the same hits as the cache's table
gives whatever was evicted or reused since, and the same simulation as without any of it."""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engines.core import PrefixCachingBlockManager, Segments, Sequence
from engines.core import prefix_cache
from harness.backends.sim import sessions as sim_sessions
from harness.backends.sim import simulate
from harness.workload import requests_at_rate
from tests.test_sim import WindowedTimer
from tests.test_sim_sessions import _engine, _same, _sessions

BS = 16


def _table_hits(blocks: PrefixCachingBlockManager, seq: Sequence) -> list[int]:
    """What the cache's hash table alone says the leading hits are."""
    limit = (seq.prefill_target - 1) // BS
    seq.tokens.block_hash(limit - 1) if limit else None
    return prefix_cache._leading_hits(blocks._cache, seq.tokens.hashes, 0, limit)


@settings(max_examples=40, deadline=None, derandomize=True)  # the same 40 cases every run: CI never meets a new one
@given(seed=st.integers(0, 10_000), num_blocks=st.sampled_from([12, 30, 200]))
def test_hinted_hits_are_the_tables_hits_whatever_happened_between_turns(seed, num_blocks):
    """Conversations take turns on a small cache while strangers evict and reuse blocks between
    them: each admission's hits (from the hint, then the table) are exactly the table's."""
    rng = random.Random(seed)
    blocks = PrefixCachingBlockManager(num_blocks, BS, watermark=0.0)
    runs = {c: ((1000 * c, rng.randint(1, 60)),) for c in range(3)}  # each conversation's tokens so far
    last: dict[int, Segments | None] = {c: None for c in range(3)}
    hinted = 0
    for i in range(60):
        c = rng.randrange(4)
        if c == 3:  # a stranger: its own tokens, evicting some of the sessions' blocks
            n = rng.randint(1, 120)
            seq = Sequence(i, n, 1, Segments(((5000 + i, n), (6000 + i, 1)), BS))
        else:
            out = rng.randint(1, 30)
            prompt = runs[c] + ((1000 * c + 1 + i, rng.randint(0, 40)),)
            tokens = Segments(prompt + ((2000 + i, out),), BS, after=last[c], continued=True)
            seq = Sequence(i, sum(n for _, n in prompt), out, tokens)
            hinted += tokens.hint is not None
        if not blocks.can_admit(seq):
            continue
        want = _table_hits(blocks, seq)
        assert blocks.lookup(seq) == want
        blocks.admit(seq)
        seq.num_computed = seq.prompt_len  # its prefill ran; then its decodes, as far as the room lets them
        if blocks.can_grow(seq, seq.prompt_len + seq.output_len - 1):
            seq.num_computed = seq.prompt_len + seq.output_len - 1
            blocks.grow(seq, seq.num_computed)
        blocks.free(seq)
        if c < 3:
            runs[c], last[c] = seq.tokens.runs, seq.tokens
        blocks.audit([])
    assert hinted > 10


def test_continued_tokens_hash_as_fresh_ones():
    first = Segments(((1, 50), (2, 37)), BS, continued=True)
    first.block_hash(4)  # all 5 full blocks (87 tokens)
    first.freed_table = [7, 3, 9]
    nxt = Segments(((1, 50), (2, 37), (3, 70)), BS, after=first)
    fresh = Segments(((1, 50), (2, 37), (3, 70)), BS)
    assert [nxt.block_hash(i) for i in range(9)] == [fresh.block_hash(i) for i in range(9)]
    assert nxt.hint == [7, 3, 9] and first.freed_table is None  # handed over once
    assert [first.block_hash(i) for i in range(5)] == [fresh.block_hash(i) for i in range(5)]  # (its hashes too: anew)
    other = Segments(((1, 50), (4, 80)), BS, after=nxt)  # not a continuation: nothing of nxt's hashes taken
    assert [other.block_hash(i) for i in range(8)] == [Segments(((1, 50), (4, 80)), BS).block_hash(i) for i in range(8)]


def test_a_hint_naming_blocks_this_engine_lacks_is_ignored():
    blocks = PrefixCachingBlockManager(8, BS)
    tokens = Segments(((1, 40),), BS)
    tokens.hint = [3, 200]  # from a larger engine
    seq = Sequence(0, 40, 1, tokens)
    assert blocks.lookup(seq) == []


@pytest.mark.parametrize("kv_blocks,policy", [(40, "sarathi"), (80, "vllm"), (400, "sarathi")])
def test_a_simulation_is_the_same_without_continuations(monkeypatch, kv_blocks, policy):
    reqs = requests_at_rate(_sessions(60, kv_blocks, heads=2, think=0.05), {"name": "poisson"}, 20.0, 3)
    with_hints = simulate(reqs, engine := _engine(policy, kv_blocks * 16), WindowedTimer())
    stats = vars(engine.blocks.stats).copy()
    plain = sim_sessions.sim_sequence
    monkeypatch.setattr(sim_sessions, "sim_sequence", lambda i, spec, bs, after=None, continued=False: plain(i, spec, bs))
    without = simulate(reqs, engine := _engine(policy, kv_blocks * 16), WindowedTimer())
    _same(with_hints, without)
    assert vars(engine.blocks.stats) == stats and stats["hits"] > 0
