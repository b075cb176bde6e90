"""Non-Poisson arrival processes: gamma CV, capped compatibility rate, constant, trace, closed loop."""
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from omegaconf import OmegaConf

from common.errors import HarnessError
from harness.workload import arrival_offsets, concurrency_limit, load_workload

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "fixtures" / "workload" / "trace_with_arrivals.csv"
SPLITWISE = REPO.parent / "shared" / "traces" / "splitwise_conv.csv"


def gaps(t):
    return np.diff(np.concatenate([[0.0], t]))


@pytest.mark.parametrize("cv", [0.5, 1.0, 2.0, 4.0])
def test_gamma_has_requested_cv_and_rate(cv):
    t = arrival_offsets({"name": "gamma", "cv": cv}, 5.0, 200_000, 0)
    g = gaps(t)
    assert abs(g.std() / g.mean() / cv - 1) < 0.05
    assert abs(g.mean() * 5.0 - 1) < 0.02
    np.testing.assert_allclose(t, 2.0 * arrival_offsets({"name": "gamma", "cv": cv}, 10.0, 200_000, 0))


@pytest.mark.parametrize("cv", [0, -1, math.nan, "x"])
def test_gamma_bad_cv(cv):
    with pytest.raises(HarnessError, match="cv"):
        arrival_offsets({"name": "gamma", "cv": cv}, 1.0, 10, 0)


def test_capped_poisson_effective_rate():
    # The original artifact's 3x-mean cap: real rate is 1/(1 - e^-3) = 1.0524x nominal.
    rate, n = 2.0, 200_000
    t = arrival_offsets({"name": "poisson_capped"}, rate, n, 0)
    factor = n / t[-1] / rate
    assert abs(factor - 1.052) <= 0.01, factor
    assert gaps(t).max() <= 3.0 / rate + 1e-12


def test_constant():
    t = arrival_offsets({"name": "constant"}, 4.0, 5, 0)
    np.testing.assert_allclose(t, [0.25, 0.5, 0.75, 1.0, 1.25])


def test_closed_loop_marker():
    proc = {"name": "closed_loop", "concurrency": 8}
    assert np.array_equal(arrival_offsets(proc, None, 4, 0), np.zeros(4))
    assert concurrency_limit(proc) == 8
    assert concurrency_limit({"name": "poisson"}) is None
    with pytest.raises(HarnessError, match="concurrency"):
        arrival_offsets({"name": "closed_loop"}, None, 4, 0)


def test_trace_replay_aligned_with_filtered_lengths():
    ds = {"name": "fx", "trace_file": str(FIXTURE), "max_total_tokens": 8192, "sampling": "sequential"}
    proc = {"name": "trace", "trace_file": str(FIXTURE), "max_total_tokens": 8192}
    w = load_workload(ds, 4, 0)
    t = arrival_offsets(proc, None, 4, 0)
    # the 9000-token row is dropped on both sides, so row i keeps its own time
    assert w.prompt_lens.tolist() == [100, 200, 300, 400]
    assert t.tolist() == [0.0, 0.5, 2.0, 4.0]
    np.testing.assert_allclose(arrival_offsets({**proc, "time_scale": 0.5}, None, 4, 0), [0, 0.25, 1.0, 2.0])
    scaled = arrival_offsets({**proc, "scale_to_rate": True}, 3.0, 4, 0)
    assert math.isclose(3 / (scaled[-1] - scaled[0]), 3.0)
    with pytest.raises(HarnessError, match="5 arrivals asked for but the trace has 4 rows"):
        arrival_offsets(proc, None, 5, 0)


def test_trace_needs_arrived_at(tmp_path):
    p = tmp_path / "noarr.csv"
    p.write_text("num_prefill_tokens,num_decode_tokens\n1,2\n")
    with pytest.raises(HarnessError, match=r"noarr\.csv: missing column\(s\) arrived_at"):
        arrival_offsets({"name": "trace", "trace_file": str(p)}, None, 1, 0)


def test_trace_going_back_in_time(tmp_path):
    p = tmp_path / "back.csv"
    p.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n1.0,1,2\n0.5,1,2\n")
    with pytest.raises(HarnessError, match=r"back\.csv: row 2 \(line 3\): arrived_at = '0.5' goes back in time"):
        arrival_offsets({"name": "trace", "trace_file": str(p)}, None, 2, 0)


def test_hydra_configs_compose():
    # The arrival/trace config takes its file and filter from the selected dataset by interpolation.
    load = lambda p: yaml.safe_load((REPO / "experiments" / p).read_text())  # noqa: E731
    cfg = OmegaConf.create({"dataset": load("dataset/splitwise_conv.yaml"), "arrival": load("arrival/trace.yaml")})
    arrival = OmegaConf.to_container(cfg.arrival, resolve=True)
    assert arrival["trace_file"] == "../shared/traces/splitwise_conv.csv" and arrival["max_total_tokens"] is None
    for name in ("poisson", "gamma", "constant", "poisson_capped", "closed_loop"):
        assert load(f"arrival/{name}.yaml")["name"] == name


@pytest.mark.skipif(not SPLITWISE.is_file(), reason="real traces not present at <repo>/../shared/traces")
def test_splitwise_replay():
    ds = yaml.safe_load((REPO / "experiments" / "dataset" / "splitwise_conv.yaml").read_text())
    proc = {"name": "trace", "trace_file": ds["trace_file"], "max_total_tokens": ds["max_total_tokens"], "time_scale": 0.5}
    w = load_workload(ds, 2048, 0)
    t = arrival_offsets(proc, None, 2048, 0)
    assert len(w) == t.size == 2048 and np.all(np.diff(t) >= 0)
    assert w.prompt_lens[:2].tolist() == [374, 396] and math.isclose(t[1], 4.314579 * 0.5)
