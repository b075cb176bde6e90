"""The prefill/decode study's figure and table (issue 17 item 5), from real saved runs: cluster runs
are kept apart from the paper's single-engine figures, the table names the layout with the highest
capacity, and the study's cells are what the matrix says."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.analysis.figures import load_inputs
from harness.analysis.studies import study_of
from engines.perf.queries import single_prefill_times
from harness.analysis.matrix import paper_matrix
from harness.analysis.pd.matrix import (PD_CRITERIA, PD_DEPLOYMENTS, PD_TTFT_MULTIPLIERS, PD_TTFT_PROMPT, distserve_cells,
                                        pd_cells, pd_layouts, pd_ttft_slo)
from harness.analysis.pd.figs import distserve_check, distserve_markdown, pd_markdown, pd_rows, pd_table

ROOT = Path(__file__).resolve().parent.parent


def test_the_study_covers_every_layout_and_criterion_at_equal_gpus():
    cells = pd_cells()
    assert len(cells) == 2 * len(PD_CRITERIA) * len(pd_layouts())
    assert set(pd_layouts()) == {"x4", "1p3d", "2p2d", "3p1d"}
    assert {c.name for c in cells} <= {c.name for c in paper_matrix()}
    for c in cells:  # every split uses all four instances' GPUs, as the replicas do
        words = dict(o.split("=", 1) for o in c.overrides)
        n = int(words.get("cluster.instances", 0)) or int(words["cluster.prefill_instances"]) + int(words["cluster.decode_instances"])
        assert n == 4


def test_the_ttft_slos_are_priced_on_the_presets_own_deployments():
    from harness.config import compose
    from harness.config import plan_experiment
    for preset, (model, gpu, tp) in PD_DEPLOYMENTS.items():
        d = plan_experiment(compose([f"experiment={preset}", "search.num_requests=16"])).deployment
        assert (d.model_name, d.gpu, d.tp, d.pp) == (model, gpu, tp, 1)
        t = float(single_prefill_times(d.perf, np.array([PD_TTFT_PROMPT]))[0])
        for kind, m in PD_TTFT_MULTIPLIERS.items():
            assert pd_ttft_slo(preset, kind) == pytest.approx(m * t, rel=0.05)  # two significant digits


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    out = tmp_path_factory.mktemp("pd")
    small = ["search.num_requests=48", "search.rel_tol=0.2", f"results_dir={out}", "progress=false"]
    for cell in pd_cells():
        if cell.name in ("pd_mistral7b_paper_x4", "pd_mistral7b_paper_3p1d", "pd_mistral7b_loose_1p3d"):
            p = subprocess.run([sys.executable, "-m", "harness", *cell.overrides, *small],
                               capture_output=True, text=True, cwd=ROOT, timeout=600)
            assert p.returncode == 0, p.stderr
    for cell in [*distserve_cells(), None]:
        words = cell.overrides if cell else ("experiment=mistral7b_strict", "scheduler=[sarathi]")
        p = subprocess.run([sys.executable, "-m", "harness", *words, *small], capture_output=True, text=True, cwd=ROOT,
                           timeout=600)
        assert p.returncode == 0, p.stderr
    return out


def test_cluster_runs_stay_out_of_the_paper_figures_and_feed_the_study(saved, tmp_path):
    inputs = load_inputs(saved, include_other=True, reference_dir=None)
    assert set(inputs.runs["experiment"]) == {"mistral7b_strict", "distserve_opt13b_chatbot"}
    assert set(inputs.probes["run_dir"]) <= set(inputs.runs["run_dir"])
    rows = pd_rows(inputs.clusters)
    assert set(zip(rows["criterion"], rows["label"])) == {
        ("paper", "Sarathi-Serve ×4"), ("paper", "vLLM ×4"), ("paper", "3P:1D"), ("loose", "1P:3D")}
    assert (rows["per_gpu"] * rows["num_gpus"] == rows["capacity_qps"]).all()
    table = pd_table(inputs.clusters)
    paper = table[table["criterion"].str.startswith("paper")].iloc[0]
    mine = rows[rows["criterion"] == "paper"].set_index("label")["capacity_qps"]
    assert mine[paper["winner"]] == mine.max() and paper["best P:D"] == "3P:1D"
    assert paper["vLLM (colocated)"] == mine["vLLM ×4"] and paper["P:D capacity"] == mine["3P:1D"]
    assert "3P:1D" in pd_markdown(table)
    (fig,) = study_of("fig17_prefill_decode").draw_figures(inputs, tmp_path, only=("fig17_prefill_decode",))
    assert fig.path is not None and fig.path.stat().st_size > 10_000, fig.skipped


def test_without_study_runs_the_figure_says_how_to_get_them(tmp_path):
    inputs = load_inputs(tmp_path, reference_dir=None)
    (fig,) = study_of("fig17_prefill_decode").draw_figures(inputs, tmp_path, only=("fig17_prefill_decode",))
    assert fig.path is None and "pd_cells" in fig.skipped


def test_the_distserve_check_compares_capacity_per_gpu(saved):
    inputs = load_inputs(saved, include_other=True, reference_dir=None)
    check = distserve_check(inputs.runs, inputs.clusters)
    (cc, cg), (dc, dg) = check["side"]["colocated"], check["side"]["disaggregated"]
    assert (cg, dg) == (1, 3)  # vLLM on one GPU; one 2-GPU (PP 2) prefill and one 1-GPU decode instance
    assert check["ratio"] == pytest.approx((dc / dg) / (cc / cg)) and check["direction_holds"] == (check["ratio"] > 1)
    text = distserve_markdown(check)
    assert f"{check['ratio']:.2f}x" in text and check["published"] in text
    assert distserve_check(inputs.runs.iloc[0:0], inputs.clusters.iloc[0:0]) is None
