"""What the paper's capacity matrix would cost to measure live, from the simulated searches' own
probes: a live probe lasts as long as the simulated one took to serve its requests, first arrival
to last token (num_completed / request_throughput), on the deployment's GPUs. The README quotes
`matrix_cost_text` verbatim and tests/test_readme.py recomputes it from results/reference.
"""
from __future__ import annotations

import pandas as pd

from harness.analysis import style
from harness.analysis.serve.compare import MAIN_SCHEDULERS, capacity_mode

NODE_GPUS, NODES = 8, 8  # the cluster the wall time is priced on: 8 nodes of 8 GPUs


def probe_hours(probes: pd.DataFrame) -> pd.DataFrame:
    """The capacity searches' probes of the main schedulers, each with its serving hours and GPU-hours."""
    p = capacity_mode(probes)
    p = p[p["scheduler"].isin(MAIN_SCHEDULERS) & (p["num_requests"] >= 2048)]
    hours = p["num_completed"] / p["request_throughput"] / 3600
    return p.assign(hours=hours, gpu_hours=hours * p["num_gpus"])


def matrix_cost(probes: pd.DataFrame) -> dict:
    p = probe_hours(probes)
    cells = p.groupby(["model", "parallel", "dataset", "slo_kind"], sort=False)
    searches = p.groupby(["model", "parallel", "dataset", "slo_kind", "scheduler"], sort=False)["hours"].sum()
    by_cell = cells["gpu_hours"].sum()
    gpu_hours = float(p["gpu_hours"].sum())
    return {"cells": len(by_cell), "searches": len(searches), "probes": len(p), "hours": float(p["hours"].sum()),
            "gpu_hours": gpu_hours, "by_cell": by_cell, "searches_hours": searches,
            "longest": searches.idxmax() if len(searches) else None, "longest_h": float(searches.max()) if len(searches) else 0.0,
            "wall_h": gpu_hours / (NODE_GPUS * NODES), "probes_frame": p}


def _span(values) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:.0f}-{hi:.0f}" if round(lo) != round(hi) else f"{lo:.0f}"


def matrix_cost_text(probes: pd.DataFrame) -> str:
    """The README's sentence: totals, the 8-GPU cells, the rest as ranges, the longest searches."""
    c = matrix_cost(probes)
    if not c["probes"]:
        return ""
    cell = c["by_cell"]

    def of(model: str, parallel: str) -> list[float]:
        d = cell[(cell.index.get_level_values(0) == model) & (cell.index.get_level_values(1) == parallel)]
        return [float(d.xs(k, level="slo_kind").sum()) for k in ("strict", "relaxed") if k in d.index.get_level_values("slo_kind")]

    big = [f"{label} {' and '.join(f'{x:.0f}' for x in v)}"
           for model, parallel, label in (("llama2-70b", "tp4pp2", "LLaMA2-70B TP4-PP2 on A40"),
                                          ("falcon-180b", "tp4pp2", "Falcon-180B TP4-PP2"), ("falcon-180b", "tp8", "Falcon TP-8"))
           if (v := of(model, parallel))]
    small = [f"{label} {_span(v)}" for model, label in (("yi-34b", "Yi-34B"), ("mistral-7b", "Mistral-7B"))
             if (v := [float(x) for k, x in cell.items() if k[0] == model])]
    p = c["probes_frame"]
    orca = c["searches_hours"][c["searches_hours"].index.get_level_values("scheduler") == "orca"]
    slow = orca[orca.index.get_level_values(0) == "llama2-70b"]
    orca_probe = p[(p["scheduler"] == "orca") & (p["model"] == "llama2-70b") & p["is_capacity"].astype(bool)]
    worst = orca_probe.loc[orca_probe["hours"].idxmax()] if len(orca_probe) else None
    model, parallel, _, _, sched = c["longest"]
    text = (f"the {c['cells']} capacity cells of Figs 10-11 and 13 ({c['searches']} searches, {c['probes']} probes) come to "
            f"**{c['hours']:,.0f} hours of serving, {c['gpu_hours']:,.0f} GPU-hours**. The 8-GPU cells dominate: "
            f"{', '.join(big)} GPU-h (strict, relaxed); {', '.join(small[:1])} GPU-h a cell, {', '.join(small[1:])}.")
    if worst is not None and len(slow):
        text += (f" Orca's searches are the long ones ({_span(slow.to_numpy())} h each on LLaMA2-70B: at "
                 f"its capacity, {worst['qps']:.2g} QPS, one probe of {int(worst['num_requests']):,} requests takes "
                 f"{worst['hours']:.0f} h).")
    text += (f" On {NODES} nodes of {NODE_GPUS} GPUs ({NODES * NODE_GPUS} GPUs, one search per deployment at a time) that "
             f"is about {c['wall_h']:.0f} h of wall time at best ({c['gpu_hours']:,.0f} / {NODES * NODE_GPUS}), and no less "
             f"than the longest search, {c['longest_h']:.0f} h ({style.scheduler_label(sched)} on {model} {parallel}).")
    return text
