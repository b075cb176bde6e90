"""The pricer's scalar path (engines/perf/scalar_rows.py, compiled by mypyc) gives the vectorized
model's doubles, and so does the path it replaces where it is not compiled.

Both paths are forced here whichever this checkout runs (its build or its source), so the scalar
functions' order of operations is checked even where they run interpreted: an operation swapped
or a sum taken over a shifted table fails."""
import numpy as np
import pytest

from engines.perf import batch_pricer, decode_runs, scalar_rows
from test_perf_pricer import MODELS, random_batches, reference_stages
from test_perf_pricer_runs import short_runs


def _scalar(monkeypatch, on: bool) -> None:
    monkeypatch.setattr(decode_runs, "COMPILED", on)
    monkeypatch.setattr(batch_pricer, "COMPILED", on)
    monkeypatch.setattr(batch_pricer, "_sum", scalar_rows.table_sum if on else batch_pricer._map_sum)


@pytest.mark.parametrize("on", [True, False], ids=["scalar", "numpy"])
@pytest.mark.parametrize("name", list(MODELS))
def test_decode_runs_as_lists_are_the_vectorized_doubles(name, on, monkeypatch):
    _scalar(monkeypatch, on)
    p = MODELS[name]
    rng = np.random.default_rng(23)
    for base, lo, hi in short_runs(rng, 150):
        if rng.random() < 0.3:  # larger batches, and runs that cross K/V block edges of the longest
            base = np.concatenate([base, rng.integers(0, 9000, size=int(rng.integers(1, 60)))])
            hi += int(rng.integers(0, 300))
        ctx = base[None, :] + np.arange(lo, hi)[:, None]
        want = reference_stages(p, np.ones_like(ctx), ctx).max(axis=-1).tolist()
        assert p.decode_run_times(tuple(base.tolist()), lo, hi) == want, (base.tolist(), lo, hi)
        assert p._pricer.decode_run_list(base, lo, hi) == want


@pytest.mark.parametrize("on", [True, False], ids=["scalar", "numpy"])
@pytest.mark.parametrize("name", list(MODELS))
def test_batches_and_chunk_runs_are_the_vectorized_doubles(name, on, monkeypatch):
    _scalar(monkeypatch, on)
    p = MODELS[name]
    rng = np.random.default_rng(len(name) + 1)
    news, ctxs = random_batches(rng, 300)
    for new, ctx in zip(news, ctxs):
        want = reference_stages(p, [new], [ctx])[0].tolist() if new else [0.0] * p.pp
        assert p.iteration_time(tuple(new), tuple(ctx)) == max(want), (new, ctx)
    for _ in range(40):  # row i of a chunk run: its decodes i contexts on, the chunk i chunks on
        d, chunk, k = int(rng.integers(1, 80)), int(rng.integers(2, 600)), int(rng.integers(1, 12))
        ctx = tuple(int(c) for c in rng.integers(1, 9000, d)) + (int(rng.integers(0, 4000)),)
        new = (1,) * d + (chunk,)
        rows = [[c + i for c in ctx[:-1]] + [ctx[-1] + i * chunk] for i in range(k)]
        want = reference_stages(p, [list(new)] * k, rows).max(axis=-1).tolist()
        assert p.chunk_run_times(new, ctx, k) == want, (ctx, chunk, k)


def test_the_sums_are_of_the_shifted_items():
    table = [float(i * i) for i in range(50)]
    assert scalar_rows.table_sum(table, (3, 7, 7), 2) == 25.0 + 81.0 + 81.0
    assert scalar_rows.count_sum(list(range(50)), [1, 2], 10) == 23


@pytest.mark.parametrize("on", [True, False], ids=["scalar", "interpreted"])
def test_run_ends_sum_and_cut_as_stepping(on, monkeypatch):
    """A decode run's ends are the clock stepping would keep, cut before the first row that starts
    at or after the horizon (bisected as bisect_left probes), one row at least."""
    from bisect import bisect_left
    from itertools import accumulate
    monkeypatch.setattr(scalar_rows, "COMPILED", on)
    rng = np.random.default_rng(5)
    for _ in range(300):
        dts = (rng.random(int(rng.integers(1, 80))) * 0.03 + 0.01).tolist()
        t = float(rng.random() * 86400.0)
        horizon = [np.inf, t, t - 1.0, t + float(rng.random()) * sum(dts), t + sum(dts) + 1.0][int(rng.integers(0, 5))]
        want = list(accumulate(dts, initial=t))[1:]
        if horizon != np.inf:
            want = want[:max(1, bisect_left(range(len(want)), horizon, key=lambda i: want[i] - dts[i]))]
        assert scalar_rows.run_ends(dts, t, horizon) == want, (dts, t, horizon)
