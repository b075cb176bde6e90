"""The memo of whole-block hash chains (engines/core/chain_memo.py) under tokens.Segments: hashes
equal to the definition's with any memo, however the blocks are asked for, and a bounded memo."""
from __future__ import annotations

import random
import tracemalloc

import pytest

from engines.core import Segments, tokens
from engines.core.chain_memo import DEFAULT_MAX_WEIGHT, ENTRY_WEIGHT, ChainMemo

BS = 16


def reference_hashes(runs, bs: int) -> list[int]:
    """Every full block's hash from the definition, no memo: block j covers tokens [j*bs, (j+1)*bs),
    its key the (segment, first offset, tokens) of each piece, chained through its parent's hash."""
    pieces = [(seg, off) for seg, n in runs for off in range(n)]  # one per token
    out, last = [], tokens.ROOT_HASH
    for j in range(len(pieces) // bs):
        key: list[int] = []
        for seg, off in pieces[j * bs:(j + 1) * bs]:
            if key and key[-3] == seg and key[-2] + key[-1] == off:
                key[-1] += 1
            else:
                key += (seg, off, 1)
        last = hash((last, tuple(key)))
        out.append(last)
    return out


def sessions(rng: random.Random, n: int):
    """Prompts as the simulator builds them: each turn holds the turns before it, segments shared
    between sessions at other places too (so a memo keyed without the parent hash would be wrong)."""
    shared = [(10_000 + k, rng.randint(1, 80)) for k in range(5)]
    for s in range(n):
        runs = [rng.choice(shared)] if rng.random() < 0.5 else []
        for t in range(rng.randint(1, 6)):
            runs.append((1000 * s + 2 * t, rng.randint(1, 120)))
            yield tuple(runs)
            runs.append((1000 * s + 2 * t + 1, rng.randint(0, 90)))
            if rng.random() < 0.3:
                runs.append(rng.choice(shared))


@pytest.mark.parametrize("max_weight", [DEFAULT_MAX_WEIGHT, 2 * ENTRY_WEIGHT + 40, 200])
def test_hashes_equal_the_definition_with_any_memo(monkeypatch, max_weight):
    monkeypatch.setattr(tokens, "MEMO", ChainMemo(max_weight))  # small ones turn generations often
    rng = random.Random(max_weight)
    for runs in sessions(rng, 60):
        want = reference_hashes(runs, BS)
        seg = Segments(runs, BS)
        asked = list(range(len(want)))
        rng.shuffle(asked)  # lazily, in any order
        assert [seg.block_hash(i) for i in asked] == [want[i] for i in asked], runs
        assert tokens.MEMO.weight <= max_weight
        with pytest.raises(IndexError):  # a block that is not full is never hashed
            seg.block_hash(len(want))


def test_a_later_turn_finds_the_earlier_turns_runs(monkeypatch):
    memo = ChainMemo()
    monkeypatch.setattr(tokens, "MEMO", memo)
    turn1 = ((1, 100), (2, 70))
    Segments(turn1, BS).block_hash(len(reference_hashes(turn1, BS)) - 1)
    held = memo.weight
    turn2 = turn1 + ((3, 50),)
    assert Segments(turn2, BS).block_hash(12) == reference_hashes(turn2, BS)[12]  # its last full block
    assert memo.weight == held + 2 + ENTRY_WEIGHT  # only the new run's two whole blocks were added


def test_memo_is_bounded_in_units_and_bytes():
    """Many distinct runs: the memo never holds more than max_weight units, and a unit costs at
    most 44 bytes (chain_memo.py's statement of its memory), whatever the chains' lengths."""
    max_weight = 1 << 14
    for count in (1, 3, 40, 200):  # short chains: entries dominate; long ones: hashes do
        memo = ChainMemo(max_weight)
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        for k in range(4 * max_weight // (count + ENTRY_WEIGHT)):  # enough to turn generations twice
            memo.chain(hash(("parent", k)), 7 + k, 16 * k, count, BS)
            assert memo.weight <= max_weight
        peak = tracemalloc.get_traced_memory()[1] - base  # the generations' turns included
        tracemalloc.stop()
        assert memo.weight > max_weight // 2  # it holds what it may (one full generation at least)
        assert peak <= 44 * max_weight, (count, peak)


def test_memo_refuses_a_bound_below_two_entries():
    with pytest.raises(ValueError):
        ChainMemo(2 * ENTRY_WEIGHT - 1)


def test_the_written_out_hash_is_pythons_at_every_edge():
    """chain_memo._chain (CPython's tuple and int hashes in 64-bit arithmetic, what the compiled build
    runs) gives Python's hash((prev, (seg, o, bs))) for parents at the int hash's edges (the modulus,
    its multiples, -1's stand-in, the 64-bit ends) and any other, interpreted or compiled."""
    from engines.core.chain_memo import _chain, _hashed
    m = (1 << 61) - 1
    edges = [0, 1, -2, m - 1, m, m + 1, -m, -m - 1, 2 * m, -2 * m, 3 * m + 2, -(1 << 63), (1 << 63) - 1,
             tokens.ROOT_HASH]
    rng = random.Random(7)
    parents = edges + [rng.randint(-(1 << 63), (1 << 63) - 1) for _ in range(300)]
    for last in parents:
        seg, off, bs = rng.choice([0, 3, -5, 10**9]), rng.randint(0, 10**5), rng.choice([1, 16, 32])
        assert _chain(last, seg, off, 4, bs) == _hashed(last, seg, off, 4, bs), last
