"""The prefix cache's eviction order (engines/core/eviction_order.py) is an ordered dict's order:
blocks added go last, blocks discarded leave, the oldest are taken first, whatever the interleaving,
across compactions of its log and blocks read ahead then discarded."""
from __future__ import annotations

import random
from collections import OrderedDict

import numpy as np
import pytest

from engines.core.eviction_order import EvictionOrder


@pytest.mark.parametrize("num_blocks,seed", [(1, 0), (7, 1), (64, 2), (300, 3)])
def test_the_order_is_an_ordered_dicts_under_random_operations(num_blocks, seed):
    rng = random.Random(seed)
    order, want = EvictionOrder(num_blocks), OrderedDict()
    out = list(range(num_blocks))  # blocks not in the order
    for _ in range(4000):
        op = rng.random()
        if op < 0.4 and out:  # a sequence frees some blocks (tail first)
            blocks = rng.sample(out, rng.randint(1, min(len(out), 40)))
            order.add(np.array(blocks, dtype=np.intp))
            want.update(dict.fromkeys(blocks))
        elif op < 0.7 and want:  # an admission reuses some of them as hits
            blocks = rng.sample(list(want), rng.randint(1, min(len(want), 40)))
            order.discard(np.array(blocks, dtype=np.intp))
            for b in blocks:
                del want[b]
        elif want:  # an allocation evicts the oldest (mostly one: a decode's next block)
            n = 1 if rng.random() < 0.7 else rng.randint(1, len(want))
            blocks = order.pop_oldest(n)
            assert blocks == [want.popitem(last=False)[0] for _ in range(n)]
        else:
            continue
        out = sorted(set(range(num_blocks)) - set(want))
        assert len(order) == len(want)
        assert order.blocks() == list(want)


def test_taking_more_than_it_holds_is_refused():
    order = EvictionOrder(4)
    order.add(np.array([2, 0], dtype=np.intp))
    with pytest.raises(ValueError, match="3 blocks asked"):
        order.pop_oldest(3)
    assert order.pop_oldest(2) == [2, 0] and order.pop_oldest(0) == []
