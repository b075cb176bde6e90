"""The simulator's timeline (harness/backends/sim/timeline.py): token times kept once for the
requests that share them, each request's read back in order; a Watch counts every gap over its
TBT limit, single tokens and decode runs alike, from each request's own last token."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from engines.core import Sequence
from harness.backends.sim.timeline import Timeline


def _seqs(*ids):
    return tuple(Sequence(i, 1, 1) for i in ids)


def test_shared_token_times_come_back_per_request_and_the_watch_counts_every_gap():
    watch = SimpleNamespace(tbt_s=0.5, tbt_over=0)
    line = Timeline(3, watch)  # type: ignore[arg-type]
    line.tokens_at(_seqs(0), 1.0)
    line.tokens_run(_seqs(0), [1.2, 1.4])  # request 0 alone: its pieces join
    line.tokens_at(_seqs(0, 1), 2.0)  # a gap of 0.6 for 0; 1's first token
    line.tokens_run(_seqs(0, 1), [2.1, 2.9, 3.0])  # a gap of 0.8 each
    line.tokens_at(_seqs(2), 3.1)
    line.tokens_at(_seqs(1), 4.0)  # a gap of 1.0 for 1
    want = {0: [1.0, 1.2, 1.4, 2.0, 2.1, 2.9, 3.0], 1: [2.0, 2.1, 2.9, 3.0, 4.0], 2: [3.1]}
    for i, times in want.items():
        assert line.token_times(i).tolist() == times and line.first_token(i) == times[0]
    assert watch.tbt_over == sum(int(np.count_nonzero(np.diff(t) > 0.5)) for t in want.values()) == 4
    assert len(line.pieces[0]) == 2  # one piece: each time stored once, however many requests share it
    flat, lengths = line.gathered([2, None, 0])
    assert flat.tolist() == want[2] + want[0] and lengths == [1, 0, 7]
    assert line.token_times(2).dtype == np.float64 and np.isnan(Timeline(1).first_token(0))
