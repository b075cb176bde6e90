"""`calibrate` fits speed on requests spread over the whole run and judges on the others, with the
whole stream replayed (issue 50, item 8): a fit that replays only the run's first half misses the
queueing the second half's arrivals cause its own requests, and trades one speed against another
to make up for it. The measured run here is the simulator's own replay under known factors, so the
truth is known: the fit must find it and the held-out requests must agree with it."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engines.perf.calibration import Calibration
from harness.config import compose, experiment_config
from harness.records import RequestRecord
from harness.validate.compare import capacity_mismatch, compare
from harness.validate.fit import calibrate, split
from harness.validate.replay import replay, target_for
from harness.validate.runfile import MeasuredRun

WORDS = ["model.name=tiny-llama", "hardware=cpu", "hardware.cpu_flops=1e11", "hardware.cpu_bandwidth=2e10",
         "perf.stack=ideal", "scheduler=sarathi", "scheduler.sarathi.token_budget=256", "max_model_len=512"]
TRUTH = {"flops_scale": 0.6, "bandwidth_scale": 0.4}


def _stream(n: int = 64, gap_s: float = 0.004) -> list[RequestRecord]:
    """n requests close enough that they share batches: a later arrival slows an earlier request."""
    rng = np.random.default_rng(1)
    arrivals = np.cumsum(rng.exponential(gap_s, n)) - gap_s
    nan = float("nan")
    return [RequestRecord(i, float(a), int(rng.integers(64, 240)), int(rng.integers(8, 40)), nan, nan, nan, np.array([]))
            for i, a in enumerate(arrivals)]


@pytest.fixture(scope="module")
def measured():
    stream = _stream()
    target = target_for(MeasuredRun(Path("synthetic.jsonl"), "jsonl", tuple(stream), 0, True), experiment_config(compose(WORDS)),
                        kv_tokens=16384)
    start = {"step_cpu_s": target.base.cpu_overhead_s, "seq_cpu_s": target.base.cpu_overhead_per_seq_s}
    real = replay(target, stream, Calibration(TRUTH | start, 0.0))
    return MeasuredRun(Path("synthetic.jsonl"), "jsonl", tuple(real), 0, True), target


def test_the_split_is_by_request_spread_over_the_run(measured):
    run, _ = measured
    fitted, held = split(run, 0.5)
    assert sorted(fitted + held) == list(range(len(run.records))) and not set(fitted) & set(held)
    assert len(fitted) == len(run.records) // 2
    order = sorted(range(len(run.records)), key=lambda i: run.records[i].arrival_s)
    first_half = set(order[: len(order) // 2])
    assert abs(len(first_half & set(fitted)) - len(fitted) / 2) <= 1  # as many fitted early as late
    small, _ = split(run, 0.25)
    assert len(small) == len(run.records) // 4


def test_the_fit_explains_the_requests_it_was_not_fitted_on(measured):
    run, target = measured
    fit = calibrate(run, target, 0.5, tuple(TRUTH))
    # The two speeds are only loosely told apart by these statistics (a long valley of near-equal
    # fits): what must hold is that the fitted pair explains requests it never saw.
    assert fit.fit.compared + fit.held_out.compared == len(run.records)
    assert fit.held_out.compared == len(split(run, 0.5)[1])
    assert fit.calibration.held_out_error < 0.05 < fit.before_held_out.headline_error()
    assert "spread over the run" in fit.calibration.fitted_on and not fit.warnings


def test_opposite_ttft_and_tpot_errors_are_called_a_capacity_mismatch(measured):
    """The simulator with a tenth of the KV cache queues requests (TTFT up) that then run in smaller
    batches (TPOT down): no speed factor explains both, and the comparison says so."""
    run, target = measured
    from dataclasses import replace

    squeezed = replace(target, engine=replace(target.engine, kv_capacity_tokens=1024))
    start = {"step_cpu_s": target.base.cpu_overhead_s, "seq_cpu_s": target.base.cpu_overhead_per_seq_s}
    sim = replay(squeezed, run.records, Calibration(TRUTH | start, 0.0))
    c = compare(list(run.records), sim, 0, True)
    line = capacity_mismatch(c, "calibrated")
    assert c.row("ttft.mean").error > 0.1 and c.row("tpot.mean").error < -0.1, c.signed()
    assert line is not None and "capacity mismatch" in line
    assert capacity_mismatch(compare(list(run.records), list(run.records), 0, True), "x") is None
