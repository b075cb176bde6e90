"""A session's turn freed *parked* (engines/core/prefix_cache.py: its blocks evictable as one group,
its next turn taking its hint back as one slice) makes every decision the per-block books make:
the same hits, evictions, free list and LRU order after every operation, whatever strangers,
shared prefixes, preemptions and a small cache do between the turns."""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engines.core import PrefixCachingBlockManager, Segments, Sequence
from engines.core.kv_tier import HostTier
from engines.core.parked_turns import ParkedTurns
from harness.backends.sim import simulate
from harness.workload import requests_at_rate
from tests.core_source import on_the_source
from tests.test_sim import WindowedTimer
from tests.test_sim_sessions import _engine, _same, _sessions

BS = 4


def _world(parks: bool, seed: int, num_blocks: int, steps: int, tier: bool) -> tuple[list[tuple], int]:
    """Run one seeded stream of admissions, decodes, frees and preemptions on a block manager that
    parks turns or not; a snapshot of its books after every operation, and how many turns it parked."""
    rng = random.Random(seed)
    blocks = PrefixCachingBlockManager(num_blocks, BS, watermark=0.0,
                                       tier=HostTier(capacity_blocks=6) if tier else None)
    blocks.parks_turns = parks
    sessions = 4
    runs = {c: ((1000 * c, rng.randint(1, 30)),) for c in range(sessions)}  # each conversation's tokens so far
    last: dict[int, Segments | None] = {c: None for c in range(sessions)}
    busy: set[int] = set()  # conversations with a turn in flight
    live: list[tuple[Sequence, int]] = []  # admitted sequences, with their conversation (-1: a stranger)
    waiting: list[tuple[Sequence, int]] = []  # preempted, to readmit
    snaps, parked = [], 0
    for i in range(steps):
        op = rng.random()
        if op < 0.45:  # a new sequence: a conversation's next turn, or a stranger sharing some prefix
            c = rng.randrange(sessions + 2)
            out = rng.randint(1, 12)
            if c < sessions and c not in busy:
                # usually the whole history and a new message; sometimes its last answer edited away
                history = runs[c] if rng.random() < 0.85 else runs[c][:-1]
                prompt = history + ((1000 * c + 1 + i, rng.randint(0 if history else 1, 20)),)
                tokens = Segments(prompt + ((5000 + i, out),), BS, after=last[c], continued=rng.random() < 0.9)
            else:
                c = -1
                share = runs[rng.randrange(sessions)]  # another conversation's history, or part of it
                share = share[:rng.randint(0, len(share))]
                prompt = share + ((7000 + i, rng.randint(1, 25)),)
                tokens = Segments(prompt + ((8000 + i, out),), BS)
            seq = Sequence(i, sum(n for _, n in prompt), out, tokens)
            candidates = [(seq, c)]
        elif op < 0.55 and waiting:
            candidates = [waiting.pop(0)]
        else:
            candidates = []
        for seq, c in candidates:
            if blocks.can_admit(seq):
                blocks.admit(seq)
                seq.num_computed = seq.prefill_target
                live.append((seq, c))
                if c >= 0:
                    busy.add(c)
        op = rng.random()
        if live and op < 0.4:  # decodes of a live sequence, as far as room lets them
            seq, _ = live[rng.randrange(len(live))]
            n = min(seq.prompt_len + seq.output_len - 1, seq.num_computed + rng.randint(1, 6))
            if blocks.can_grow(seq, n):
                blocks.grow(seq, n)
                seq.num_computed = n
        elif live and op < 0.75:  # one finishes
            seq, c = live.pop(rng.randrange(len(live)))
            parked += seq.tokens.continued and len(seq.block_table) > 0
            blocks.free(seq)
            if c >= 0:
                runs[c], last[c] = seq.tokens.runs, seq.tokens
                busy.discard(c)
        elif live and op < 0.82:  # one is preempted: its books freed, its tokens recomputed later
            seq, c = live.pop(rng.randrange(len(live)))
            blocks.free(seq)
            seq.reset_for_recompute()
            waiting.append((seq, c))
        tables = [s.block_table[:] for s, _ in live]
        blocks.audit(tables)
        snaps.append((blocks.evictable_order(), blocks.num_free, list(blocks._free), tables,
                      vars(blocks.stats).copy(), [s.cached_tokens for s, _ in live],
                      None if blocks.tier is None else list(blocks.tier._lru)))
    return snaps, parked


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 100_000), num_blocks=st.sampled_from([10, 24, 60, 300]), tier=st.booleans())
def test_parked_turns_make_the_per_block_books_decisions(seed, num_blocks, tier):
    parked, parked_count = _world(True, seed, num_blocks, 120, tier)
    plain, _ = _world(False, seed, num_blocks, 120, tier)
    for step, (a, b) in enumerate(zip(parked, plain)):
        assert a == b, f"step {step}"


@on_the_source  # it replaces ParkedTurns' methods (tests/core_source.py)
def test_the_stream_parks_turns_evicts_from_them_and_takes_blocks_out_singly(monkeypatch):
    """The differential test above reaches every path of a parked group (a guard that it stays able to fail)."""
    seen = {"park": 0, "park_shared": 0, "evict": 0, "evict_one": 0, "unpark": 0, "take_back": 0}
    for name in seen:
        method = getattr(ParkedTurns, name)

        def counted(self, *args, _m=method, _n=name):
            out = _m(self, *args)
            seen[_n] += _n != "take_back" or bool(out[1])
            shortcuts["led"] += _n == "take_back" and out[0] > 0  # a slice past a shared lead
            return out
        monkeypatch.setattr(ParkedTurns, name, counted)
    shortcuts = {"unhit": 0, "unregistered": 0, "flagged": 0, "led": 0}  # the reads a parked turn's next turn skips
    held_alone, park = ParkedTurns.held_alone, ParkedTurns.park

    def alone(self, table, start, unhit):
        shortcuts["unhit"] += unhit > 0
        shortcuts["flagged"] += any(t.shared for t in self.live.values())
        return held_alone(self, table, start, unhit)

    def parking(self, seq, key, taken, start=0):
        shortcuts["unregistered"] += seq.blocks_unregistered > 0
        return park(self, seq, key, taken, start)
    monkeypatch.setattr(ParkedTurns, "held_alone", alone)
    monkeypatch.setattr(ParkedTurns, "park", parking)
    for seed in range(20):
        for num_blocks in (10, 24, 60):
            _world(True, seed, num_blocks, 120, tier=False)
    assert all(n > 5 for n in seen.values()), seen
    assert all(n > 5 for n in shortcuts.values()), shortcuts


@pytest.mark.parametrize("kv_blocks,policy", [(40, "sarathi"), (80, "vllm"), (400, "sarathi")])
def test_a_simulation_is_the_same_without_parking(monkeypatch, kv_blocks, policy):
    """Whole simulations of conversations: parking on (the default) against off, records and counters."""
    reqs = requests_at_rate(_sessions(60, kv_blocks, heads=2, think=0.05), {"name": "poisson"}, 20.0, 3)
    parked = simulate(reqs, engine := _engine(policy, kv_blocks * 16), WindowedTimer())
    stats = vars(engine.blocks.stats).copy()
    assert engine.blocks.parks_turns and engine.blocks.parked.blocks > 0  # turns left parked
    engine = _engine(policy, kv_blocks * 16)
    engine.blocks.parks_turns = False  # on the instance: a compiled class's instances keep their own default
    plain = simulate(reqs, engine, WindowedTimer())
    assert engine.blocks.parked.blocks == 0
    _same(parked, plain)
    assert vars(engine.blocks.stats) == stats and stats["hits"] > 0


def test_a_hint_block_cached_again_by_a_stranger_is_taken_singly():
    """A turn's last block, uncached when its turn was parked, went to the free list; a stranger with
    the same tokens grew into it and cached the hash the next turn wants. The next turn's hint then
    matches past the group's cached blocks: only those come back as a slice, the stranger's singly."""
    books = []
    for parks in (True, False):
        blocks = PrefixCachingBlockManager(20, BS, watermark=0.0)
        blocks.parks_turns = parks
        turn1 = Sequence(0, 6, 1, Segments(((1, 6), (2, 1)), BS, continued=True))
        blocks.admit(turn1)
        turn1.num_computed = 6
        stranger = Sequence(1, 4, 4, Segments(((1, 6), (2, 1), (3, 1)), BS))  # turn 2's first 8 tokens
        blocks.admit(stranger)  # nothing cached yet
        stranger.num_computed = 4
        hint = turn1.block_table[:]
        blocks.free(turn1)  # its first block cached, its second (6 tokens of 8) to the free list
        blocks.grow(stranger, 8)  # takes that block, and caches turn 2's second block hash in it
        stranger.num_computed = 8
        assert stranger.block_table[1] == hint[1]
        blocks.free(stranger)
        turn2 = Sequence(2, 12, 1, Segments(((1, 6), (2, 1), (3, 5), (4, 1)), BS, after=turn1.tokens, continued=True))
        assert blocks.lookup(turn2) == hint
        blocks.admit(turn2)
        blocks.audit([turn2.block_table])
        books.append((blocks.evictable_order(), list(blocks._free), turn2.block_table[:]))
    assert books[0] == books[1]


def test_a_turn_sharing_a_block_past_its_first_is_not_parked():
    """A turn is parked only if it alone holds every block, not only its first: two requests that
    computed the same first block at once leave the turn's copy uncached (held by it alone), while
    its second block, cached, is hit by a third request. Freed, the turn must free block by block."""
    books = []
    for parks in (True, False):
        blocks = PrefixCachingBlockManager(20, BS, watermark=0.0)
        blocks.parks_turns = parks
        turn = Sequence(0, 12, 1, Segments(((1, 8), (2, 4), (3, 1)), BS, continued=True))
        other = Sequence(1, 8, 1, Segments(((1, 4), (9, 4), (4, 1)), BS))  # the same first block only
        blocks.admit(turn)
        blocks.admit(other)
        other.num_computed = 8
        blocks.register(other)  # its first block cached first
        turn.num_computed = 12
        blocks.register(turn)  # so the turn's first block stays uncached, its second is cached
        assert blocks._hash[turn.block_table[0]] is None and blocks._hash[turn.block_table[1]] is not None
        third = Sequence(2, 12, 1, Segments(((1, 8), (5, 4), (6, 1)), BS))
        blocks.admit(third)  # hits the other's first block and the turn's second
        assert third.block_table[:2] == [other.block_table[0], turn.block_table[1]]
        blocks.free(turn)
        blocks.audit([other.block_table, third.block_table])
        books.append((blocks.evictable_order(), list(blocks._free), third.block_table[:]))
    assert books[0] == books[1]


def test_a_turn_past_a_shared_lead_is_taken_back_past_it():
    """A conversation's turn whose first block a stranger still holds (a shared system prompt) is
    parked past that block (park_shared), and its next turn takes the rest back as one slice, the
    shared block singly: the same books as freeing block by block."""
    books = []
    for parks in (True, False):
        blocks = PrefixCachingBlockManager(20, BS, watermark=0.0)
        blocks.parks_turns = parks
        turn1 = Sequence(0, 12, 1, Segments(((1, 4), (2, 8), (3, 1)), BS, continued=True))
        blocks.admit(turn1)
        turn1.num_computed = 12
        blocks.register(turn1)
        stranger = Sequence(1, 8, 4, Segments(((1, 4), (9, 4), (4, 4)), BS))  # the same first block (the prompt)
        blocks.admit(stranger)
        assert stranger.block_table[0] == turn1.block_table[0]
        turn1.num_computed = 13
        blocks.free(turn1)  # its first block still the stranger's: parked past it
        turn2 = Sequence(2, 17, 1, Segments(((1, 4), (2, 8), (3, 1), (5, 4), (6, 1)), BS, after=turn1.tokens,
                                            continued=True))
        hint = turn2.tokens.hint[:]
        assert blocks.lookup(turn2) == hint[:3]
        blocks.admit(turn2)
        if parks:
            assert (turn2.tokens.taken, blocks.parked._starts) == (3, {turn2.tokens.group: 1})  # a slice past the lead
        blocks.audit([stranger.block_table, turn2.block_table])
        books.append((blocks.evictable_order(), list(blocks._free), turn2.block_table[:], blocks._ref[:]))
    assert books[0] == books[1]
