"""Short decode runs, the simulator's common case, priced bit for bit as the vectorized model does.

Most runs a fleet simulates are a few dozen iterations whose longest sequence stays within one
K/V block of the split-KV kernel, so every row has the same splits: BatchPricer prices those
with one gather of its stacked tables and scalar split-KV terms (`_one_split_run_units`), the rest
row by row (`_run_units`). Both must give the vectorized path's doubles, and `decode_run_times`
(a one-stage model's stage times as they are, a pipeline's slowest stage) its maximum.
"""
import numpy as np
import pytest

from test_perf_pricer import MODELS, reference_stages


def short_runs(rng, count: int):
    """(base, lo, hi) as the fleet makes them: 1-12 sequences, 1-60 iterations, contexts 0..9000
    (past Mistral's 4,096-token window), some ending just before or just after a block edge."""
    for _ in range(count):
        b = int(rng.integers(1, 13))
        base = rng.integers(0, 9000, size=b)
        if rng.random() < 0.3:  # the longest sequence just below a 128-key block edge
            base[0] = 128 * int(rng.integers(1, 70)) - int(rng.integers(1, 4)) - 1
        lo = int(rng.integers(0, 3))
        yield base, lo, lo + int(rng.integers(1, 60))


@pytest.mark.parametrize("name", list(MODELS))
def test_short_decode_runs_bit_for_bit(name):
    p = MODELS[name]
    pricer = p._pricer
    one_split = 0
    for base, lo, hi in short_runs(np.random.default_rng(7), 400):
        ctx = base[None, :] + np.arange(lo, hi)[:, None]
        want = reference_stages(p, np.ones_like(ctx), ctx)
        got = p.decode_run_stage_times(base, lo, hi)
        assert got.tobytes() == want.tobytes(), (base.tolist(), lo, hi)
        assert p.decode_run_times(base, lo, hi).tolist() == want.max(axis=-1).tolist()
        longest = int(base.max())
        one_split += pricer.call is not None and pricer._blocks[longest + lo] == pricer._blocks[longest + hi - 1]
    if pricer.call is not None:  # both ways were taken
        assert 0 < one_split < 400
