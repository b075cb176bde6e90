"""harness.analysis.drift: passes on an unchanged tree, catches injected drift, missing cells and
fixed-rate latency changes (fixture: tests/fixtures/results)."""
import json
import shutil
from pathlib import Path

import pytest

from harness.analysis.drift import DriftReport, Tolerances, compare, main

FIXTURE = Path(__file__).parent / "fixtures" / "results"


@pytest.fixture
def current(tmp_path):
    dst = tmp_path / "current"
    shutil.copytree(FIXTURE, dst)
    return dst


def _edit_summary(root: Path, experiment: str, edit) -> None:
    (path,) = (root / experiment).glob("*/summary.json")
    s = json.loads(path.read_text())
    edit(s)
    path.write_text(json.dumps(s))


def test_unchanged_tree_passes(tmp_path):
    report = compare(FIXTURE, FIXTURE)
    assert report.passed and not report.failures
    assert {r.status for r in report.rows} == {"ok"}
    metrics = {r.metric for r in report.rows}
    assert metrics == {"capacity_qps", "ttft_p50_s", "tbt_p99_s"}  # capacity runs and fixed-rate runs
    assert "PASS" in report.write(tmp_path / "DRIFT.md").read_text().splitlines()[0]


def test_injected_capacity_drift_fails_on_that_cell_only(current, tmp_path):
    def slower(s):
        s["schedulers"]["sarathi"]["capacity_qps"] *= 0.90  # -10 %: beyond the 5 % tolerance

    _edit_summary(current, "yi34b_tp2_strict", slower)
    report = compare(current, FIXTURE)
    assert not report.passed
    (bad,) = report.failures
    assert (bad.label["experiment"], bad.label["scheduler"], bad.metric, bad.status) == (
        "yi34b_tp2_strict", "sarathi", "capacity_qps", "drift")
    assert bad.rel_change == pytest.approx(-0.10)
    text = report.to_markdown()
    assert text.startswith("# Nightly drift report: FAIL") and "| DRIFT | yi34b_tp2_strict |" in text


def test_drift_within_tolerance_passes(current):
    _edit_summary(current, "mistral7b_strict", lambda s: s["schedulers"]["vllm"].update(
        capacity_qps=s["schedulers"]["vllm"]["capacity_qps"] * 1.03))
    assert compare(current, FIXTURE).passed
    assert not compare(current, FIXTURE, Tolerances(capacity_rel=0.01)).passed


def test_fixed_rate_latency_drift(current):
    def stall(s):
        s["schedulers"]["hybrid_only"]["probes"][0]["tbt_p99_s"] *= 1.5

    _edit_summary(current, "yi34b_tp2_fixed_rate", lambda s: None)  # untouched run still compares
    (path,) = [p for p in (current / "yi34b_tp2_ablation").glob("*/summary.json")
               if json.loads(p.read_text())["workload"]["dataset"] == "openchat_sharegpt4"]
    s = json.loads(path.read_text())
    stall(s)
    path.write_text(json.dumps(s))
    (bad,) = compare(current, FIXTURE).failures
    assert (bad.label["scheduler"], bad.label["dataset"], bad.metric) == ("hybrid_only", "openchat_sharegpt4", "tbt_p99_s")


def test_missing_cell_fails_unless_allowed(current):
    shutil.rmtree(current / "falcon180b_tp8_strict")
    report = compare(current, FIXTURE)
    assert [r.status for r in report.failures] == ["missing"]
    assert compare(current, FIXTURE, Tolerances(fail_on_missing=False)).passed
    # the other way round the cell is new today: listed, never failing
    assert {r.status for r in compare(FIXTURE, current).rows} == {"ok", "new"}


def test_empty_reference_does_not_pass(tmp_path):
    (tmp_path / "ref").mkdir()
    report = compare(FIXTURE, tmp_path / "ref")
    assert isinstance(report, DriftReport) and not report.passed


def test_main_exit_status(current, tmp_path):
    out = tmp_path / "DRIFT.md"
    assert main([f"current={FIXTURE}", f"reference={FIXTURE}", f"out={out}"]) == 0 and out.is_file()
    _edit_summary(current, "yi34b_tp2_relaxed", lambda s: s["schedulers"]["orca"].update(capacity_qps=0.1))
    assert main([f"current={current}", f"reference={FIXTURE}", f"out={out}"]) == 1
    assert main([str(current), str(FIXTURE), "--out", str(out)]) == 1  # the old spelling still works
    assert "FAIL" in out.read_text()
    assert main([f"current={current}", f"reference={tmp_path / 'no_such_reference'}", f"out={out}"]) == 2
    assert main([f"current={current}", f"reference={FIXTURE}", "capacity_rel=-1"]) == 2
    assert main([f"current={current}", "capacity_rell=0.1"]) == 2  # unknown key: one line, exit 2


def test_reference_inside_the_results_tree_is_not_read_as_current(tmp_path):
    # The nightly default: results/ (current) holding results/reference/ (the reference).
    results = tmp_path / "results"
    shutil.copytree(FIXTURE / "mistral7b_strict", results / "mistral7b_strict")
    shutil.copytree(FIXTURE, results / "reference")
    report = compare(results, results / "reference", Tolerances(fail_on_missing=False))
    new = [r for r in report.rows if r.status == "new"]
    assert not new and {r.label["experiment"] for r in report.rows if r.status == "ok"} == {"mistral7b_strict"}


def test_changed_settings_are_noted(current):
    _edit_summary(current, "yi34b_tp2_strict", lambda s: s["schedulers"]["sarathi"]["config"].update(token_budget=256))
    (row,) = [r for r in compare(current, FIXTURE).rows
              if r.label["experiment"] == "yi34b_tp2_strict" and r.label["scheduler"] == "sarathi"]
    assert row.status == "ok" and "token budget 512.0 -> 256" in row.note
