"""The first Sarathi paper's decode speedup (arXiv 2308.16369 Sec. 5.1): a decode-only batch of B,
per token, over the marginal per-token cost of the B - 1 decodes riding on a prefill chunk. Its
own example: 49.96 ms / 4 = 12.49 ms alone against (238.4 - 234.8) / 3 = 1.2 ms riding. The
performance-model query, the iteration log and the run's composition all use it."""
from __future__ import annotations

import numpy as np
import pytest

from engines.core import Batch, Sequence
from engines.perf.queries import decode_speedup
from harness.backends.sim.iterations import IterationLog
from harness.throughput import composition


class _Affine:
    """0.1 s an iteration + 1 ms a token: a decode-only batch of B costs 0.1 + 0.001 B, a rider 1 ms."""

    def batch_times(self, new_tokens, context_lens):
        return 0.1 + 1e-3 * np.sum(np.asarray(new_tokens), axis=-1)

    def iteration_time(self, new_tokens, context_lens):
        return float(self.batch_times(np.asarray(new_tokens), np.asarray(context_lens)))


def test_the_query_divides_a_decode_only_batch_of_b_by_b():
    # (0.1 + 0.004) / 4 per token alone, 1 ms a rider: 26x (dividing by the 3 riders alone would give 34.3x)
    assert decode_speedup(_Affine(), batch=4, context=512, chunk=256, tile=0) == pytest.approx(26.0)


def test_a_run_gives_the_papers_example():
    ms = 1e-3
    it = {"start_s": np.array([0.0]), "end_s": np.array([238.4 * ms]), "prefills": np.array([1]), "decodes": np.array([3]),
          "alone_prefill_s": np.array([234.8 * ms]), "alone_decodes_s": np.array([49.96 * ms]), "alone_decodes_n": np.array([4])}
    out = composition(it)
    assert out["decode_alone_s"] == pytest.approx(12.49 * ms) and out["marginal_decode_s"] == pytest.approx(1.2 * ms)
    assert out["decode_speedup"] == pytest.approx(12.49 / 1.2)


def test_the_log_prices_a_decode_only_batch_of_the_iterations_b():
    seqs = [Sequence(i, prompt_len=100, output_len=10) for i in range(4)]
    for s in seqs[1:]:
        s.num_computed = 100  # prompt done: a decode at context 100
    log = IterationLog(_Affine(), 4)
    log.iteration(Batch.build([(seqs[0], 64), *((s, 1) for s in seqs[1:])]), 0.0, 1.0)
    cols = log.columns()
    assert cols["alone_decodes_s"][0] == pytest.approx(0.1 + 4e-3)  # 3 riders + the chunk's sequence: B = 4
    assert cols["alone_prefill_s"][0] == pytest.approx(0.1 + 64e-3)


def test_the_riders_are_compared_with_the_runs_b():
    """A run that keeps B = 6 requests in flight (its baseline's decode-only batches hold 6) compares
    3 riders with a decode-only batch of 6, not of 4: (0.1 + 0.006) / 6 a token, 1 ms a rider."""
    seqs = [Sequence(i, prompt_len=100, output_len=10) for i in range(4)]
    for s in seqs[1:]:
        s.num_computed = 100
    log = IterationLog(_Affine(), 4, batch=6)
    log.iteration(Batch.build([(seqs[0], 64), *((s, 1) for s in seqs[1:])]), 0.0, 0.1 + 67e-3)
    cols = log.columns()
    assert cols["alone_decodes_s"][0] == pytest.approx(0.1 + 6e-3) and cols["alone_decodes_n"][0] == 6
    out = composition(cols)
    assert out["decode_alone_s"] == pytest.approx((0.1 + 6e-3) / 6) and out["marginal_decode_s"] == pytest.approx(1e-3)
