"""The diurnal arrival process (issue 39 item 3: a day of traffic): a Poisson process whose rate
follows rate x (1 + amplitude x cos(2 pi (t - peak_s) / period_s)); bad knobs refused."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from common.errors import HarnessError
from harness.workload import arrival_offsets

REPO = Path(__file__).resolve().parents[1]


def test_the_rate_follows_the_day_and_averages_to_rate():
    t = arrival_offsets({"name": "diurnal", "amplitude": 0.5}, 2.0, 2 * 86400 * 4, 0)  # ~4 days at 2 QPS
    assert np.all(np.diff(t) >= 0) and t[0] > 0
    assert t[-1] / 86400 == pytest.approx(4, rel=0.01)
    hourly = np.histogram(t % 86400, bins=24, range=(0, 86400))[0] / (t[-1] / 86400) / 3600
    # peak at 14:00 (rate x 1.5 = 3 QPS), trough at 02:00 (x 0.5 = 1 QPS): the hour's mean of the curve
    assert np.argmax(hourly) in (13, 14) and np.argmin(hourly) in (1, 2)
    assert hourly[14] == pytest.approx(3.0, rel=0.05) and hourly[2] == pytest.approx(1.0, rel=0.08)


def test_a_compressed_day_and_no_amplitude_is_poisson_in_law():
    flat = arrival_offsets({"name": "diurnal", "amplitude": 0.0, "period_s": 60.0}, 5.0, 20000, 3)
    gaps = np.diff(flat)
    assert gaps.mean() == pytest.approx(0.2, rel=0.03) and gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.05)
    poisson = arrival_offsets({"name": "poisson"}, 5.0, 20000, 3)
    np.testing.assert_allclose(flat, poisson, rtol=1e-9)  # the same draws mapped through a flat curve


@pytest.mark.parametrize("knobs,message", [({"amplitude": 1.0}, "amplitude"), ({"amplitude": -0.1}, "amplitude"),
                                           ({"period_s": 0}, "period_s"), ({"peak_s": float("nan")}, "peak_s")])
def test_bad_knobs(knobs, message):
    with pytest.raises(HarnessError, match=message):
        arrival_offsets({"name": "diurnal", **knobs}, 1.0, 10, 0)


def test_the_preset():
    cfg = yaml.safe_load((REPO / "experiments" / "arrival" / "diurnal.yaml").read_text())
    assert cfg == {"name": "diurnal", "amplitude": 0.5, "period_s": 86400.0, "peak_s": 50400.0}


def test_bad_arrival_knobs_one_line_exit_2_nothing_written(tmp_path):
    from tests.cli import assert_refused
    assert_refused(tmp_path, ["experiment=yi34b_tp2_strict", "arrival=diurnal", "arrival.amplitude=1.5"], "arrival.amplitude")
