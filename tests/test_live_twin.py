"""The real-time twin's clock: absolute deadlines chained while busy, restarted after idleness.

Driven with an explicit clock (the executor takes `clock` and `sleep` for exactly this), so the
arithmetic is checked exactly; the loopback tests check it against the wall clock.
"""
from __future__ import annotations

import numpy as np
import pytest

from engines.core import Batch, Sequence
from engines.executors.realtime import RealTimeExecutor


class FixedTimer:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def batch_times(self, new_tokens, context_lens):
        return np.float64(self.seconds)


class ManualClock:
    def __init__(self) -> None:
        self.t = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.t += s


def _batch(seq_id=0) -> Batch:
    return Batch.build([(Sequence(seq_id, 10, 5), 10)])


def _twin(dt=0.010, **kw):
    clock = ManualClock()
    ex = RealTimeExecutor(FixedTimer(dt), 32000, clock=clock, sleep=clock.sleep, **kw)
    ex.add_request(0, None, None)
    return ex, clock


def test_busy_iterations_chain_on_deadlines_absorbing_loop_overhead():
    ex, clock = _twin()
    ex.execute(_batch())
    assert clock.t == pytest.approx(100.010)
    clock.t += 0.003  # the loop spent 3 ms between iterations
    ex.execute(_batch())
    assert ex.last_start == pytest.approx(100.010)  # started at the previous deadline
    assert clock.t == pytest.approx(100.020)  # so the second iteration still ends on time
    assert ex.chain_restarts == 0 and ex.late_start_s_total == 0  # absorbed, not lost


def test_lateness_beyond_one_iteration_restarts_the_chain():
    ex, clock = _twin()
    ex.execute(_batch())
    clock.t += 0.025  # more than one 10 ms iteration late
    ex.execute(_batch())
    assert ex.last_start == pytest.approx(100.035) and clock.t == pytest.approx(100.045)
    assert ex.chain_restarts == 1
    assert ex.metrics()["twin_late_start_seconds_total"] == pytest.approx(0.025)  # the time lost, on /metrics


def test_idle_engine_never_backdates_an_iteration():
    ex, clock = _twin()
    ex.execute(_batch())
    ex.idle()
    clock.t += 0.001  # a request arrives 1 ms after the engine went idle
    ex.execute(_batch())
    assert ex.last_start == pytest.approx(100.011)  # not 100.010: it starts when asked
    assert ex.chain_restarts == 0 and ex.late_start_s_total == 0  # idleness is not lateness


def test_time_scale_stretches_every_iteration():
    ex, clock = _twin(dt=0.002, time_scale=5.0)
    ex.execute(_batch())
    assert clock.t == pytest.approx(100.010)
    assert ex.metrics()["twin_predicted_seconds_total"] == pytest.approx(0.010)


def test_non_final_prefill_chunks_sample_nothing():
    ex, _ = _twin()
    seq = Sequence(0, 100, 5)
    assert ex.execute(Batch.build([(seq, 40)])) == [None]
    seq.num_computed = 40
    tok = ex.execute(Batch.build([(seq, 60)]))
    assert len(tok) == 1 and isinstance(tok[0], int) and 3 <= tok[0] < 32000
