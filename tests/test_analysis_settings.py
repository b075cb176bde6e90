"""Which runs the figures and the report draw: runs at the paper's settings, the reference runs
where the user has none, and every other run left out (or, when asked, drawn and marked)."""
import copy
import json
import shutil
from pathlib import Path

import pytest
import yaml

from harness.analysis import settings, tables
from harness.analysis.serve.capacity_figs import fig_capacity
from harness.analysis.figures import load_inputs
from harness.analysis.report import render, source_of
from harness.analysis.studies import STUDIES, study_of
from harness.analysis.style import close

CAPACITY_STUDIES = tuple(s for s in STUDIES if s.name != "sarathi23")  # the report less the offline runs' section

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "results" / "reference"
CELL = ("yi34b_tp2_strict", "openchat_sharegpt4")


@pytest.fixture(scope="module")
def cells():
    return settings.paper_cell_configs()


def test_a_paper_cell_is_at_its_settings_and_a_changed_count_is_named(cells):
    cfg = copy.deepcopy(cells[CELL])
    assert settings.judge(cfg, cells) == ""
    cfg["seed"], cfg["results_dir"], cfg["backend"]["name"] = 3, "elsewhere", "live"  # how and where, not what
    assert settings.judge(cfg, cells) == ""
    cfg["search"]["num_requests"] = 256
    cfg["scheduler"]["sarathi"]["token_budget"] = 1024
    why = settings.judge(cfg, cells)
    assert "search.num_requests=256 (paper: 2048)" in why and "scheduler.sarathi.token_budget=1024 (paper: 512)" in why
    cfg["name"] = "my_experiment"
    assert settings.judge(cfg, cells) == settings.NOT_A_CELL


def _small_copy_of_a_reference_run(results: Path) -> Path:
    """The reference Yi-34B strict sharegpt run, re-labelled as a 256-request run with another capacity."""
    src = next(p for p in (REFERENCE / CELL[0]).iterdir()
               if yaml.safe_load((p / "config.yaml").read_text())["dataset"]["name"] == CELL[1])
    dst = results / CELL[0] / "20261201-120000"
    dst.mkdir(parents=True)
    cfg = yaml.safe_load((src / "config.yaml").read_text())
    cfg["search"]["num_requests"] = 256
    (dst / "config.yaml").write_text(yaml.safe_dump(cfg))
    summary = json.loads((src / "summary.json").read_text())
    summary["schedulers"]["sarathi"]["capacity_qps"] = 9.5
    (dst / "summary.json").write_text(json.dumps(summary))
    shutil.copy(src / "requests.parquet", dst / "requests.parquet")
    return dst


def _sarathi_capacity(inputs) -> float:
    r = inputs.runs
    row = r[(r["experiment"] == CELL[0]) & (r["dataset"] == CELL[1]) & (r["scheduler"] == "sarathi")]
    assert len(row) == 1
    return float(row["capacity_qps"].iloc[0])


def test_a_small_run_is_left_out_and_the_reference_fills_its_cell(tmp_path):
    own = _small_copy_of_a_reference_run(tmp_path / "results")
    inputs = load_inputs(tmp_path / "results", reference_dir=REFERENCE)
    assert _sarathi_capacity(inputs) != 9.5 and set(inputs.runs["results_from"]) == {str(REFERENCE)}
    assert list(inputs.left_out["run_dir"].unique()) == [str(own)]
    drawn = {"serve": study_of("fig10_11_capacity").draw_figures(inputs, tmp_path / "figs", only=("fig10_11_capacity",))}
    text = render(source_of(inputs, tmp_path / "figs", head_commit="0123456789abcdef"), drawn, CAPACITY_STUDIES)
    assert "1 run(s) left out" in text and "search.num_requests=256 (paper: 2048)" in text
    assert "No run of yours" in text and "older than this checkout (0123456789)" in text


def test_asked_for_other_runs_are_drawn_and_marked(tmp_path):
    _small_copy_of_a_reference_run(tmp_path / "results")
    inputs = load_inputs(tmp_path / "results", reference_dir=REFERENCE, include_other=True)
    assert _sarathi_capacity(inputs) == 9.5 and inputs.left_out.empty
    fig = fig_capacity(inputs.runs, inputs.paper)
    try:
        ticks = [t.get_text() for ax in fig.axes for t in ax.get_xticklabels()]
        assert sum(t.startswith("✱") for t in ticks) == 1  # the one (dataset, SLO) group holding the small run
    finally:
        close(fig)
    text = render(source_of(inputs, tmp_path), {}, CAPACITY_STUDIES)
    assert "**not at the paper's settings**" in text and "| ✱ yi34b_tp2_strict |" in text


def test_numbers_read_as_numbers():
    assert tables.fmt(2048.0) == "2048" and tables.fmt(0.78125) == "0.781" and tables.fmt(12345.6) == "12346"
    assert tables.fmt(False) == "no" and tables.fmt(float("inf")) == "∞"
