"""Chunked prefills in one pool or prefill and decode apart (issue 17 item 5): the study's runs
(harness.analysis.pd.matrix.pd_cells) as one figure and one table, at equal GPUs per deployment,
and its part of figures/REPORT.md (that table and DistServe's published cell against ours).

Each deployment's four instances are laid out as colocated replicas (Sarathi-Serve, vLLM) or as
every prefill:decode split (vLLM's whole-prompt prefills on the prefill instances), and judged
three ways: the paper's criterion and DistServe's attainment at a tight and a loose TTFT SLO.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from matplotlib.figure import Figure

from harness.analysis import style, tables
from harness.analysis.figures import Inputs
from harness.analysis.study import MissingResults, Part, Source
from harness.analysis.pd.matrix import PD_CRITERIA, PD_TTFT_MULTIPLIERS, PD_TTFT_PROMPT, pd_layouts

CRITERION_LABELS = {"paper": "paper: P99 TBT + median delay ≤ 2 s",
                    **{k: f"90 % within TTFT {m:g}× a {PD_TTFT_PROMPT:,}-token prefill, TPOT = TBT SLO"
                       for k, m in PD_TTFT_MULTIPLIERS.items()}}


def pd_rows(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (deployment, criterion, layout, scheduler) of the study, with `label` (what a bar
    is called: 'Sarathi-Serve ×4', '1P:3D') and `per_gpu` (capacity / GPUs)."""
    if runs.empty:
        return runs.assign(criterion=[], arrangement=[], label=[], per_gpu=[])
    names = runs["experiment"].astype(str)
    parts = names.str.extract(r"^pd_(?P<preset>.+)_(?P<criterion>paper|tight|loose)_(?P<arrangement>x\d+|\d+p\d+d)$")
    rows = pd.concat([runs.reset_index(drop=True), parts.reset_index(drop=True)], axis=1).dropna(subset=["arrangement"])
    rows = rows[rows["mode"] == "capacity"].copy()
    rows["label"] = [style.scheduler_label(s) + " " + lay.replace("x", "×") if lay.startswith("x")
                     else lay.upper().replace("P", "P:") for s, lay in zip(rows["scheduler"], rows["arrangement"])]
    rows["per_gpu"] = rows["capacity_qps"] / rows["num_gpus"]
    return rows


def _bar_order(rows: pd.DataFrame) -> list[str]:
    colocated = [f"{style.scheduler_label(s)} ×{n}" for n in sorted({int(x[1:]) for x in rows["arrangement"] if x.startswith("x")})
                 for s in ("sarathi", "vllm")]
    split = [lay.upper().replace("P", "P:") for lay in pd_layouts() if not lay.startswith("x")]
    present = set(rows["label"])
    return [b for b in colocated + split if b in present]


def _color(label: str):
    if "×" in label:
        return style.scheduler_color("sarathi" if label.startswith(style.scheduler_label("sarathi")) else "vllm")
    return (0.55, 0.45, 0.75)  # disaggregated layouts: one colour, the split is on the axis


def fig_pd(runs: pd.DataFrame) -> Figure:
    rows = pd_rows(runs)
    if rows.empty:
        raise MissingResults("no prefill/decode study runs (harness.analysis.pd.matrix.pd_cells; "
                             "`python -m harness figure=all` runs them)")
    deps = list(rows[["model", "parallel", "gpu", "num_gpus"]].drop_duplicates().sort_values("num_gpus").itertuples(index=False))
    crits = [c for c in PD_CRITERIA if c in set(rows["criterion"])]
    fig, axes = style.new_figure(len(crits), len(deps), width=4.6, height=3.4)
    for r, (model, parallel, gpu, ngpu) in enumerate(deps):
        for c, crit in enumerate(crits):
            ax = axes[r][c]
            d = rows[(rows["model"] == model) & (rows["criterion"] == crit)]
            order = [b for b in _bar_order(rows) if b in set(d["label"])]
            vals = [float(d.loc[d["label"] == b, "capacity_qps"].iloc[0]) for b in order]
            bars = ax.bar(range(len(order)), vals, color=[_color(b) for b in order])
            best = int(np.nanargmax(vals)) if vals else -1
            for i, (b, v) in enumerate(zip(bars, vals)):
                ax.annotate(f"{v:.3g}", (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom", fontsize=7,
                            fontweight="bold" if i == best else "normal")
            ax.set_xticks(range(len(order)), order, rotation=30, ha="right", fontsize=7)
            ax.set_title(f"{style.deployment_label(model, parallel, gpu, ngpu)}\n{CRITERION_LABELS.get(crit, crit)}", fontsize=8)
            if c == 0:
                ax.set_ylabel("capacity (QPS)")
    return style.finish(fig)


def pd_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per deployment and criterion: each colocated scheduler's capacity, the best split and its
    capacity, and which layout wins."""
    rows = pd_rows(runs)
    out = []
    for (model, parallel, gpu, ngpu, crit), d in rows.groupby(["model", "parallel", "gpu", "num_gpus", "criterion"], sort=False):
        entry = {"deployment": style.deployment_label(model, parallel, gpu, int(ngpu)),
                 "criterion": CRITERION_LABELS.get(crit, crit)}
        for s in ("sarathi", "vllm"):
            hit = d[d["label"].str.startswith(style.scheduler_label(s)) & d["label"].str.contains("×")]
            entry[f"{style.scheduler_label(s)} (colocated)"] = float(hit["capacity_qps"].iloc[0]) if len(hit) else np.nan
        split = d[~d["label"].str.contains("×")]
        if len(split):
            top = split.loc[split["capacity_qps"].idxmax()]
            entry["best P:D"], entry["P:D capacity"] = top["label"], float(top["capacity_qps"])
        winner = d.loc[d["capacity_qps"].idxmax()]
        entry["winner"] = winner["label"]
        out.append(entry)
    return pd.DataFrame(out)


def pd_markdown(table: pd.DataFrame) -> str:
    if table.empty:
        return "_No prefill/decode study runs._"
    return tables.markdown([tuple(f"{v:.3g}" if isinstance(v, float) else str(v) for v in row)
                            for row in table.itertuples(index=False)], tuple(table.columns))


DISTSERVE_FILE = Path(__file__).resolve().parents[3] / "data" / "paper" / "distserve_osdi24.yaml"


def distserve_check(runs: pd.DataFrame, clusters: pd.DataFrame, path: Path = DISTSERVE_FILE) -> dict | None:
    """DistServe's published direction against ours: each side's capacity per GPU (at 90 %
    attainment), their ratio and whether the direction holds. None when either run is missing."""
    facts = yaml.safe_load(path.read_text())
    both = pd.concat([runs, clusters], ignore_index=True)
    side = {}
    for role, name in facts["cells"].items():
        hit = both[(both["experiment"] == name) & (both["mode"] == "capacity")] if not both.empty else both
        if hit.empty:
            return None
        row = hit.iloc[-1]
        side[role] = (float(row["capacity_qps"]), int(row["num_gpus"]))
    per_gpu = {role: cap / gpus for role, (cap, gpus) in side.items()}
    ratio = per_gpu["disaggregated"] / per_gpu["colocated"] if per_gpu["colocated"] > 0 else float("inf")
    lo, hi = facts["claim"]["ratio_range"]
    return {"claim": facts["claim"]["statement"], "published": f"{lo:g}x-{hi:g}x", "side": side, "per_gpu": per_gpu,
            "ratio": ratio, "direction_holds": ratio > 1.0}


def distserve_markdown(check: dict | None) -> str:
    if check is None:
        return "_No DistServe cell runs (harness.analysis.pd.matrix.distserve_cells)._"
    (cc, cg), (dc, dg) = check["side"]["colocated"], check["side"]["disaggregated"]
    verdict = "direction reproduced" if check["direction_holds"] else "**direction not reproduced**"
    return "\n".join([
        "| layout | GPUs | capacity at 90 % attainment (QPS) | per GPU | DistServe / vLLM per GPU: published / ours | verdict |",
        "| --- | --- | --- | --- | --- | --- |",
        f"| vLLM, one GPU | {cg} | {cc:.3g} | {check['per_gpu']['colocated']:.3g} | | |",
        f"| DistServe: 1 prefill (PP 2) + 1 decode | {dg} | {dc:.3g} | {check['per_gpu']['disaggregated']:.3g} | "
        f"{check['published']} / {check['ratio']:.2f}x | {verdict} |",
    ])


def parts(inputs: Inputs, outcomes: tuple, source: Source) -> tuple[Part, ...]:
    if inputs.clusters.empty:
        return ()
    return (Part(("## Beyond the paper: one pool or prefill and decode apart", "",
                  "Capacity (QPS) of each deployment's four instances' GPUs, colocated or split (fig17). "
                  "A criterion the colocated schedulers and the splits are both judged by; the winner per row.", "",
                  pd_markdown(pd_table(inputs.clusters)), "",
                  "### A published disaggregation result: DistServe (OSDI'24) Fig. 8, chatbot, OPT-13B", "",
                  "Their settings (data/paper/distserve_osdi24.yaml): one 8x A100-SXM node, TTFT 0.25 s and TPOT "
                  "0.1 s per request, 90 % attainment, rates per GPU; openchat_sharegpt4 lengths cut at 2,047 tokens "
                  "stand in for their ShareGPT-v3 prompts.", "",
                  distserve_markdown(distserve_check(inputs.runs, inputs.clusters)), ""), "clusters"),)
