"""The fleet study (issue 39 part 5, harness/analysis/fleet): its cells are the matrix the issue
asks for, its day turns a capacity into GPU-hours by the stated rule, and its section and figures
render from a small set of saved results (written here: one summary.json and config.yaml per cell,
as a capacity search saves them), kept apart from the paper's figures."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from harness.analysis.figures import load_inputs
from harness.analysis.fleet import day
from harness.analysis.fleet.cells import INSTANCES, NOCACHE, OFFLOAD_GIB, PRESET, ROUTERS, TIERS, WORKLOADS, fleet_cells
from harness.analysis.fleet import STUDY
from harness.analysis.fleet.report import load_fleet, section
from harness.analysis.fleet.table import fleet_table

ROOT = Path(__file__).resolve().parent.parent


def _words(cell):
    return dict(o.split("=", 1) for o in cell.overrides)


def test_the_cells_cross_workloads_routers_and_tiers_and_switch_the_cache_off():
    cells = fleet_cells()
    words = [_words(c) for c in cells]
    assert all(w["experiment"] == PRESET for w in words) and len({c.name for c in cells}) == len(cells)
    crossed = {(w["dataset"], w["cluster.router"], w.get("engine.kv_offload_gib"), w.get("engine.prefix_caching"))
               for w in words}
    assert crossed == {(d, r, f"{OFFLOAD_GIB:g}" if t == "offload" else None, None)
                       for d in WORKLOADS.values() for r in ROUTERS for t in TIERS} | {
        (d, "least_outstanding", None, "false") for d in WORKLOADS.values()}


def test_the_preset_and_the_day_are_what_the_study_says():
    from harness.config import compose

    cfg = compose([*fleet_cells()[0].overrides])
    assert cfg.cluster.instances == INSTANCES and cfg.engine.prefix_caching and list(cfg.scheduler) == ["sarathi", "vllm"]
    diurnal = yaml.safe_load((ROOT / "experiments/arrival/diurnal.yaml").read_text())
    assert (diurnal["amplitude"], diurnal["period_s"], diurnal["peak_s"]) == (day.AMPLITUDE, day.PERIOD_S, day.PEAK_S)


def test_gpu_hours_follow_the_rule():
    rates = day.hourly_peak_rates(10.0)
    assert len(rates) == 24 and rates.max() == pytest.approx(10.0) and rates.argmax() in (13, 14)
    assert rates.min() == pytest.approx(10.0 / 1.5 * (1 - 0.5 * math.cos(math.pi / 12)))  # 02:00 +- half an hour
    # the fleet whose capacity is the peak needs its 8 replicas at the peak and fewer at night
    reps = day.replicas_per_hour(rates, 10.0, 8)
    assert reps.max() == 8 and reps.min() == 3
    assert list(reps) == [math.ceil(r / (10.0 / 8) - 1e-9) for r in rates]
    assert day.gpu_hours(rates, 10.0, 8, 2) == 2 * reps.sum()
    assert day.gpu_hours(rates, 20.0, 8, 1) < day.gpu_hours(rates, 10.0, 8, 1)  # twice the capacity, fewer GPUs
    assert np.isnan(day.gpu_hours(rates, 0.0, 8, 1))


def _capacity(name: str, policy: str) -> float:
    """A made-up capacity per cell: affinity and the tier each add, vLLM half of Sarathi-Serve."""
    cap = 8.0 * (1.5 if "session_affinity" in name else 1.0) * (1.25 if name.endswith("offload") else 1.0)
    cap *= 0.5 if name.endswith(NOCACHE) else 1.0
    return cap * (0.5 if policy == "vllm" else 1.0)


def _save(root: Path, cell, stamp: str = "20261204-120000", **over) -> None:
    cfg = {"name": cell.name, "model": {"name": "qwen3-32b"}, "hardware": {"gpu": "h100-80g-sxm"},
           "parallel": {"tp": 1, "pp": 1}, "cluster": {"instances": INSTANCES, "router": _words(cell)["cluster.router"]},
           "dataset": {"name": _words(cell)["dataset"]}, "search": {"num_requests": 64, **over}}
    schedulers = {}
    for policy in ("sarathi", "vllm"):
        cap = _capacity(cell.name, policy)
        hit = 0.0 if cell.name.endswith(NOCACHE) else 0.9 if "affinity" in cell.name else 0.4
        probe = {"qps": cap, "passed": True, "reason": "", "cache_token_hit_rate": hit, "num_preemptions": 3,
                 "request_throughput": cap, "ttft_p99_s": 1.0, "starvation": ""}
        schedulers[policy] = {"config": {"policy": policy}, "capacity_qps": cap, "lowest_failing_qps": cap * 1.05,
                              "probes": [probe, {**probe, "qps": cap * 1.05, "passed": False}]}
    summary = {"experiment": cell.name, "created": "2026-12-04T12:00:00Z", "num_gpus": INSTANCES, "mode": "capacity",
               "slo": {"kind": "strict", "tbt_s": 0.22}, "workload": {"dataset": _words(cell)["dataset"], "num_requests": 64},
               "schedulers": schedulers}
    run = root / cell.name / stamp
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps(summary))
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    root = tmp_path_factory.mktemp("fleet")
    cells = fleet_cells()
    for cell in cells:
        _save(root, cell)
    _save(root, cells[0], "20261204-130000", num_requests=32)  # newer, not at its cell's settings: left out
    configs = {c.name: {"name": c.name, "search": {"num_requests": 64}} for c in cells}
    return root, configs


def test_the_section_and_figures_render_from_saved_results(saved, tmp_path):
    root, configs = saved
    study = load_fleet(root, cells=configs)
    table = fleet_table(study.rows)
    assert len(table) == 2 * len(fleet_cells()) and list(study.left_out["experiment"]) == [fleet_cells()[0].name]
    # the day's peak is today's fleet's capacity: it needs 8 replicas at the peak, affinity (1.5x) fewer GPU-hours
    base = table[(table["router"] == "least_outstanding") & (table["tier"] == "gpu") & (table["policy"] == "sarathi")]
    assert base["gpu_hours"].iloc[0] == day.gpu_hours(day.hourly_peak_rates(8.0), 8.0, 8, 1)
    aff = table[(table["router"] == "session_affinity") & (table["tier"] == "gpu") & (table["policy"] == "sarathi")]
    assert (aff["gpu_hours"].to_numpy() < base["gpu_hours"].iloc[0]).all()
    outcomes = STUDY.draw_figures(study, tmp_path)
    assert [o.path is not None and o.path.is_file() for o in outcomes] == [True, True]
    text = "\n".join(section(study, outcomes, tmp_path))
    assert "load only 2.00x (hit rate 40%); session affinity 2.00x (hit rate 90%)" in text  # Sarathi-Serve / vLLM
    assert "session affinity 3.00x" in text  # over the cache-off fleet
    assert "load only 1.25x (+0 points)" in text  # the tier's capacity ratio and added hit rate
    assert "![" in text and "left out" in text


def test_the_papers_figures_leave_the_fleet_runs_to_their_study(saved, monkeypatch):
    from harness.analysis import settings

    monkeypatch.setattr(settings, "paper_cell_configs", dict)  # no paper cell: composing the paper's matrix is slow
    root, _ = saved
    inputs = load_inputs(root, include_other=True)
    assert inputs.runs.empty and inputs.clusters.empty and inputs.left_out.empty


def test_the_study_is_one_registry_line_and_silent_without_runs(tmp_path):
    """Registered: its figures by name, its cells in figure=all's; with no run and no figure, no part
    (the tables-only report, results/reference/REPORT.md, stays as it was)."""
    import re

    from harness.analysis.report import source_of
    from harness.analysis.studies import STUDIES, own_runs, study_of

    assert STUDY in STUDIES and study_of("fig19_fleet_capacity") is STUDY and study_of("fig20_fleet_gpu_hours") is STUDY
    assert STUDY.cells() == fleet_cells() and own_runs() and all(re.match(own_runs(), c.name) for c in fleet_cells())
    source = source_of(load_inputs(tmp_path / "none"), tmp_path)
    empty = STUDY.load(source)
    assert STUDY.parts(empty, (), source) == ()
    skipped = STUDY.draw_figures(empty, tmp_path)
    assert [o.path for o in skipped] == [None, None] and "No fleet study runs" in "\n".join(STUDY.parts(empty, skipped, source)[0].lines)
