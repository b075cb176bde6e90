"""The published ratio that labels one of our cells, and the headline table built from it.

One rule for every place that puts the paper's number beside ours (the capacity figure's
annotations, the report's headline table, which the README quotes verbatim and
tests/test_readme.py checks): a claim about that very cell (deployment, dataset, SLO, baseline)
labels it with its value; a claim of "up to X" (the paper's best cell of a deployment) labels the
cell where our ratio is highest, as "up to X", and no other.
"""
from __future__ import annotations

import pandas as pd

from harness.analysis.serve.compare import capacity_mode, paper_config
from harness.analysis.paper import Paper

# The README's headline rows: the strict sharegpt cell of each of the paper's deployments, Sarathi
# over vLLM and over Orca (Falcon-180B: vLLM on TP4-PP2 and on cross-node TP-8).
HEADLINE = (
    ("Mistral-7B, 1x A100, strict", "mistral-7b", "tp1", (("vllm", "tp1"),), (("orca", "tp1"),)),
    ("Yi-34B TP2, strict", "yi-34b", "tp2", (("vllm", "tp2"),), (("orca", "tp2"),)),
    ("LLaMA2-70B TP4-PP2 (A40), strict", "llama2-70b", "tp4pp2", (("vllm", "tp4pp2"),), (("orca", "tp4pp2"),)),
    ("Falcon-180B TP4-PP2, strict (vLLM TP4-PP2; TP-8)", "falcon-180b", "tp4pp2", (("vllm", "tp4pp2"), ("vllm", "tp8")),
     (("orca", "tp4pp2"),)),
)
HEADLINE_CELL = {"dataset": "openchat_sharegpt4", "slo_kind": "strict"}


def _matches(sel, row: dict) -> bool:
    """Whether a ratio cell (no GPU column: a deployment is its model and parallel) is of `sel`."""
    return all(row[k] in v if isinstance(v, tuple) else row[k] == v for k, v in sel.items() if k != "gpu")


def ratios(runs: pd.DataFrame, paper: Paper) -> pd.DataFrame:
    """Our Sarathi / baseline capacity of every cell pair at the paper's settings: one row per
    (model, parallel of Sarathi, dataset, slo_kind, baseline, parallel of the baseline)."""
    runs = capacity_mode(runs)
    if runs.empty:
        return pd.DataFrame(columns=["model", "parallel", "dataset", "slo_kind", "baseline", "base_parallel", "ratio"])
    runs = runs[paper_config(runs, paper)]
    keys = ["model", "dataset", "slo_kind"]
    ours = runs[runs["scheduler"] == "sarathi"]
    base = runs[runs["scheduler"] != "sarathi"]
    pairs = ours.merge(base, on=keys, suffixes=("", "_b"))
    pairs = pairs[pairs["capacity_qps_b"] > 0]
    return pd.DataFrame({
        "model": pairs["model"], "parallel": pairs["parallel"], "dataset": pairs["dataset"],
        "slo_kind": pairs["slo_kind"], "baseline": pairs["scheduler_b"], "base_parallel": pairs["parallel_b"],
        "ratio": pairs["capacity_qps"] / pairs["capacity_qps_b"],
    }).reset_index(drop=True)


def _times(value: float) -> str:
    text = f"{value:g}"
    return (text if "." in text else text + ".0") + "x"  # 4.0x, as the paper writes it


def published_label(paper: Paper, table: pd.DataFrame, cell: dict) -> str:
    """The paper's value for `cell` (a row of `ratios`): "3.7x", "up to 2.6x", or "" (none)."""
    num = {"model": cell["model"], "parallel": cell["parallel"], "dataset": cell["dataset"],
           "slo_kind": cell["slo_kind"], "scheduler": "sarathi"}
    den = {**num, "parallel": cell["base_parallel"], "scheduler": cell["baseline"]}
    claims = [c for c in paper.capacity_ratios if _matches(c.numerator, num) and _matches(c.denominator, den)]
    for c in claims:  # a claim about this very cell first
        if c.match != "up_to":
            return _times(c.value)
    for c in claims:
        candidates = [r for r in table.to_dict("records") if _matches(c.numerator, {**r, "scheduler": "sarathi"})
                      and _matches(c.denominator, {**r, "parallel": r["base_parallel"], "scheduler": r["baseline"]})]
        best = max(candidates, key=lambda r: r["ratio"]) if candidates else None
        if best is not None and all(best[k] == cell[k] for k in ("model", "parallel", "dataset", "slo_kind", "baseline",
                                                                  "base_parallel")):
            return f"up to {_times(c.value)}"
    return ""


def headline_markdown(runs: pd.DataFrame, paper: Paper) -> str:
    """The README's table: our ratio on each deployment's strict sharegpt cell, the paper's label beside it."""
    table = ratios(runs, paper)
    lines = ["| deployment, SLO (sharegpt) | vs vLLM: paper / ours | vs Orca: paper / ours |", "| --- | --- | --- |"]
    for label, model, parallel, vllm, orca in HEADLINE:
        cols = []
        for bases in (vllm, orca):
            parts = []
            for baseline, base_parallel in bases:
                cell = {"model": model, "parallel": parallel, **HEADLINE_CELL, "baseline": baseline,
                        "base_parallel": base_parallel}
                hit = table[(table["model"] == model) & (table["parallel"] == parallel) & (table["dataset"] == cell["dataset"])
                            & (table["slo_kind"] == cell["slo_kind"]) & (table["baseline"] == baseline)
                            & (table["base_parallel"] == base_parallel)]
                ours = f"{hit['ratio'].iloc[0]:.2f}x" if not hit.empty else "not run"
                parts.append(f"{published_label(paper, table, cell) or '—'} / {ours}")
            cols.append("; ".join(parts))
        lines.append(f"| {label} | {cols[0]} | {cols[1]} |")
    return "\n".join(lines)


def figure_label(paper: Paper, table: pd.DataFrame, cell: dict) -> str:
    """The annotation's paper part: " (paper 3.7×)", " (paper up to 2.6×)" or " (paper: –)"."""
    label = published_label(paper, table, cell)
    return f" (paper {label.replace('x', '×')})" if label else " (paper: –)"
