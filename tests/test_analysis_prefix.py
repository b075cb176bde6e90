"""The prefix-caching study's figure, table and answer (issue 30), from real saved runs: its runs
are kept apart from the paper's figures, the table reads each cell's capacity and the hit rate at
Sarathi-Serve's capacity probe, and the study's cells are what the matrix says."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.analysis.figures import load_inputs
from harness.analysis.studies import study_of
from harness.analysis.matrix import paper_matrix
from harness.analysis.prefix.matrix import prefix_cells
from harness.analysis.prefix.figs import prefix_answer, prefix_markdown, prefix_table

ROOT = Path(__file__).resolve().parent.parent


def test_the_study_crosses_workloads_slos_and_the_cache():
    cells = prefix_cells()
    assert len(cells) == 8 and {c.name for c in cells} <= {c.name for c in paper_matrix()}
    words = [dict(o.split("=", 1) for o in c.overrides) for c in cells]
    assert {(w["slo.kind"], w["dataset"], w["engine.prefix_caching"]) for w in words} == {
        (k, d, p) for k in ("strict", "relaxed") for d in ("sharegpt_conversations", "agent_transcripts")
        for p in ("true", "false")}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    out = tmp_path_factory.mktemp("prefix")
    small = ["search.num_requests=96", "search.rel_tol=0.3", "search.max_qps=32", "scheduler=[sarathi,vllm,orca]",
             f"results_dir={out}", "progress=false"]
    for cell in prefix_cells():
        if "_strict_agents_" in cell.name:
            p = subprocess.run([sys.executable, "-m", "harness", *cell.overrides, *small],
                               capture_output=True, text=True, cwd=ROOT, timeout=900)
            assert p.returncode == 0, p.stderr[-2000:]
    return out


def test_study_runs_stay_out_of_the_papers_figures_and_fill_their_own(saved, tmp_path):
    inputs = load_inputs(saved, include_other=True)
    assert inputs.runs.empty and len(inputs.prefix) == 2 * 3
    table = prefix_table(inputs.prefix, inputs.prefix_probes)
    assert list(table["prefix cache"]) == ["off", "on"] or list(table["prefix cache"]) == ["on", "off"]
    on = table[table["prefix cache"] == "on"].iloc[0]
    off = table[table["prefix cache"] == "off"].iloc[0]
    assert on["hit rate at best"] > 0.5 and off["hit rate at best"] == 0  # what the capacity probe's rows say
    assert on["best budget"] == 512 and on["budget 512"] > 0 and on["vLLM"] > 0 and on["Orca"] > 0
    assert "| agent transcripts | strict (0.2 s) |" in prefix_markdown(table)
    assert "agent transcripts, strict (0.2 s): with the cache" in prefix_answer(table)
    (outcome,) = study_of("fig18_prefix_caching").draw_figures(inputs, tmp_path, only=("fig18_prefix_caching",))
    assert outcome.path is not None and outcome.path.is_file()
