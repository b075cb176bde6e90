"""The runs the report is built from: the paper's matrix as `python -m harness` override lists.

Main cells: the 8 presets (4 deployments x strict/relaxed, sharegpt). Extras: the arxiv cells of
the two single-node deployments (Fig. 10), Falcon-180B on TP-8 for vLLM (Fig. 13), Table 4's
ablations at one rate per dataset, and vLLM vs Sarathi-Serve at one rate (Fig. 1 timeline).
The studies beyond the paper keep their own cells (harness/analysis/pd/matrix.py,
harness/analysis/prefix/matrix.py); harness/analysis/matrix.py gathers every capacity study's.
"""
from __future__ import annotations

from harness.analysis.study import Cell

PRESETS = (
    "mistral7b_strict", "mistral7b_relaxed", "yi34b_tp2_strict", "yi34b_tp2_relaxed",
    "llama2_70b_tp4pp2_strict", "llama2_70b_tp4pp2_relaxed", "falcon180b_tp4pp2_strict", "falcon180b_tp4pp2_relaxed",
)
ABLATION = ("scheduler=[sarathi,hybrid_only,chunked_only]", "scheduler.sarathi.token_budget=1024")


def serve_cells(include_extras: bool = True) -> tuple[Cell, ...]:
    cells = [Cell(p, (f"experiment={p}",), "main") for p in PRESETS]
    if include_extras:
        for p in ("mistral7b", "yi34b_tp2"):
            for kind in ("strict", "relaxed"):
                cells.append(Cell(f"{p}_{kind}_arxiv", (f"experiment={p}_{kind}", "dataset=arxiv_summarization"), "extra"))
        for kind in ("strict", "relaxed"):
            cells.append(Cell(f"falcon180b_tp8_{kind}", (f"experiment=falcon180b_tp4pp2_{kind}", "parallel=tp8",
                                                          f"name=falcon180b_tp8_{kind}", "scheduler=[vllm]"), "extra"))
        cells.append(Cell("table4_sharegpt", ("experiment=yi34b_tp2_strict", "name=yi34b_tp2_ablation", *ABLATION,
                                              "search.fixed_qps=1.0", "search.num_requests=128"), "extra"))
        cells.append(Cell("table4_arxiv", ("experiment=yi34b_tp2_strict", "name=yi34b_tp2_ablation",
                                           "dataset=arxiv_summarization", *ABLATION, "search.fixed_qps=0.25",
                                           "search.num_requests=128"), "extra"))
        cells.append(Cell("fig1_fixed_rate", ("experiment=yi34b_tp2_strict", "name=yi34b_tp2_fixed_rate",
                                              "scheduler=[sarathi,vllm]", "search.fixed_qps=1.0"), "extra"))
    return tuple(cells)
