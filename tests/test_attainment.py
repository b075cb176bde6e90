"""DistServe's metrics (OSDI'24 Sec. 2 and 6): per-request SLO attainment under joint TTFT and TPOT
SLOs, the capacity at a target attainment (slo.criterion=attainment), goodput per GPU."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from harness.backends import open_backend
from harness.commands.main import main
from harness.config import compose
from harness.metrics import Slo, check_slo, good_requests
from harness.records import RequestRecord
from harness.config import plan_experiment
from harness.search.probe import search_capacity


def request(i: int, ttft: float, tpot: float, n: int = 5, error: str | None = None) -> RequestRecord:
    """Arrives at i, first token after `ttft`, then n - 1 tokens `tpot` apart."""
    times = i + ttft + tpot * np.arange(n, dtype=np.float64)
    return RequestRecord(i, float(i), 10, n, float(i), float(times[0]), float(times[-1]), times, error=error)


# TTFT, TPOT of ten requests: 6 meet TTFT <= 1 s and TPOT <= 0.1 s; one misses TTFT, one TPOT, one
# both; one meets TPOT <= 0.1 but not the TBT SLO's 0.05 (so tpot_s, not tbt_s, judges it).
TEN = [(0.5, 0.04)] * 6 + [(0.2, 0.08), (1.5, 0.04), (0.5, 0.2), (3.0, 0.3)]


def test_attainment_counts_requests_meeting_both_slos():
    records = [request(i, *tt) for i, tt in enumerate(TEN)]
    joint = Slo(tbt_s=0.05, ttft_s=1.0, tpot_s=0.1)
    assert good_requests(records, joint).tolist() == [True] * 7 + [False] * 3
    v = check_slo(records, joint)
    assert v.goodput_fraction == pytest.approx(0.7)
    span = max(r.finished_s for r in records) - 0.0
    assert v.goodput == pytest.approx(7 / span)
    # Unset, the TPOT SLO is the TBT SLO (today's goodput): the 0.08 s request is not good then.
    assert check_slo(records, Slo(tbt_s=0.05, ttft_s=1.0)).goodput_fraction == pytest.approx(0.6)
    # A request never finished is never good; one with a single token has no TPOT to miss.
    unfinished = RequestRecord(20, 0.0, 10, 5, 0.0, 0.1, np.nan, np.array([0.1]), error="unfinished at time limit")
    single = request(21, 0.1, 0.0, n=1)
    assert good_requests([unfinished, single], joint).tolist() == [False, True]


def test_attainment_criterion_passes_at_the_target_and_ignores_the_pooled_quantiles():
    records = [request(i, *tt) for i, tt in enumerate(TEN)]  # P99 TBT 0.3 s, over tbt_s
    at = lambda target: Slo(tbt_s=0.05, ttft_s=1.0, tpot_s=0.1, criterion="attainment", attainment=target)
    assert check_slo(records, at(0.7)).passed and check_slo(records, at(0.7)).reason == "ok"
    v = check_slo(records, at(0.71))
    assert not v.passed and v.reason.startswith("attainment 70.0% < 71.0%")
    assert not check_slo(records, Slo(tbt_s=0.05, ttft_s=1.0, tpot_s=0.1)).passed  # the paper's: P99 TBT
    # Failed requests still fail it, whatever the attainment.
    failed = records + [request(30, 0.1, 0.01, error="HTTP 500: boom")]
    v = check_slo(failed, at(0.5))
    assert not v.passed and "1 of 11 requests failed (1 http_status)" in v.reason


@pytest.mark.parametrize("knobs, message", [
    ({"criterion": "attainment", "ttft_s": 1.0, "attainment": 0.0}, "attainment must be in (0, 1]"),
    ({"criterion": "attainment", "ttft_s": 1.0, "attainment": 1.5}, "attainment must be in (0, 1]"),
    ({"criterion": "foo"}, "criterion must be one of paper, attainment"),
    ({"tpot_s": -1.0}, "tpot -1.0"),
    ({"criterion": "attainment"}, "set ttft_s"),
    ({"criterion": "attainment", "ttft_s": 1.0, "min_goodput_fraction": 0.9}, "min_goodput_fraction"),
])
def test_bad_slo_values_are_refused(knobs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Slo(tbt_s=0.2, **knobs)


SMALL = ["experiment=yi34b_tp2_strict", "search.num_requests=128"]
ATTAINMENT = ["slo.criterion=attainment", "slo.ttft_s=2", "slo.tpot_s=0.2"]


def test_capacity_at_90_percent_attainment_on_the_simulator():
    paper = plan_experiment(compose(SMALL))
    plan = plan_experiment(compose([*SMALL, *ATTAINMENT]))
    assert plan.slo.attainment == 0.9 and paper.slo.criterion == "paper"
    with open_backend(plan.job("vllm", progress=False)) as backend:
        by_paper = search_capacity(paper, "vllm", backend.run)
        result = search_capacity(plan, "vllm", backend.run)
    assert result.capacity_qps != by_paper.capacity_qps, (result.capacity_qps, by_paper.capacity_qps)
    for p in result.probes:
        # The share of requests with TTFT <= 2 s and TPOT <= 0.2 s, from the records' own times.
        rs = p.detail.records
        good = [r.completed and r.first_token_s - r.arrival_s <= 2.0
                and (len(r.token_times_s) < 2 or np.mean(np.diff(r.token_times_s)) <= 0.2) for r in rs]
        assert p.detail.verdict.goodput_fraction == pytest.approx(np.mean(good))
        assert p.passed == (np.mean(good) >= 0.9 and p.detail.verdict.num_errors == 0), p.qps
    passing = [p.qps for p in result.probes if p.passed]
    failing = [p.qps for p in result.probes if not p.passed]
    assert result.capacity_qps == max(passing) and min(failing) > result.capacity_qps


def test_run_saves_attainment_and_goodput_per_gpu(tmp_path, capsys):
    args = [*SMALL, *ATTAINMENT, "scheduler=[vllm]", "cluster.instances=2", "search.num_requests=64",
            f"results_dir={tmp_path}", "progress=false"]
    assert main(args) == 0
    out = capsys.readouterr().out.splitlines()
    assert "SLO attainment >= 90% of requests with TTFT <= 2 s and TPOT <= 0.2 s" in out[0]
    run_dir = Path(out[-1].removeprefix("results: "))
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["num_gpus"] == 4  # TP-2, two instances
    saved = {k: summary["slo"][k] for k in ("criterion", "attainment", "tpot_s", "ttft_s")}
    assert saved == {"criterion": "attainment", "attainment": 0.9, "tpot_s": 0.2, "ttft_s": 2.0}
    s = summary["schedulers"]["vllm"]
    for p in s["probes"]:
        assert p["goodput_per_gpu"] == pytest.approx(p["goodput"] / 4)
        assert p["passed"] == (p["goodput_fraction"] >= 0.9 and p["num_errors"] == 0)
    cap = next(p for p in s["probes"] if p["passed"] and p["qps"] == s["capacity_qps"])
    row = next(line for line in out if line.startswith("vllm")).split()
    assert row[-2:] == [f"{cap['goodput_fraction']:.1%}", f"{cap['goodput_per_gpu']:.3g}/s"], row


@pytest.mark.parametrize("args, message", [
    (["slo.criterion=attainment", "slo.ttft_s=2", "slo.attainment=0"], "slo: attainment must be in (0, 1]"),
    (["slo.criterion=attainment", "slo.ttft_s=2", "slo.attainment=1.5"], "slo: attainment must be in (0, 1]"),
    (["slo.criterion=foo"], "slo: criterion must be one of paper, attainment, got 'foo'"),
    (["slo.tpot_s=-1"], "tpot -1.0"),
    (["slo.criterion=attainment"], "set ttft_s"),
])
def test_bad_slo_knobs_one_line_exit_2_nothing_written(tmp_path, capsys, args, message):
    assert main([*SMALL, *args, "search.num_requests=16", f"results_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err
    assert not any(tmp_path.iterdir())
