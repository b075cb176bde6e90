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


def _span(values) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:.0f}-{hi:.0f}" if round(lo) != round(hi) else f"{lo:.0f}"


def matrix_cost_text(probes: pd.DataFrame) -> str:
    """The README's sentence: totals, the 8-GPU cells, the rest as ranges, the longest searches."""
    p = capacity_mode(probes)  # the capacity searches' probes of the main schedulers, with serving hours and GPU-hours
    p = p[p["scheduler"].isin(MAIN_SCHEDULERS) & (p["num_requests"] >= 2048)]
    served_h = p["num_completed"] / p["request_throughput"] / 3600
    p = p.assign(hours=served_h, gpu_hours=served_h * p["num_gpus"])
    if p.empty:
        return ""
    cell = p.groupby(["model", "parallel", "dataset", "slo_kind"], sort=False)["gpu_hours"].sum()
    searches = p.groupby(["model", "parallel", "dataset", "slo_kind", "scheduler"], sort=False)["hours"].sum()
    hours, gpu_hours = float(p["hours"].sum()), float(p["gpu_hours"].sum())

    def of(model: str, parallel: str) -> list[float]:
        d = cell[(cell.index.get_level_values(0) == model) & (cell.index.get_level_values(1) == parallel)]
        return [float(d.xs(k, level="slo_kind").sum()) for k in ("strict", "relaxed") if k in d.index.get_level_values("slo_kind")]

    big = [f"{label} {' and '.join(f'{x:.0f}' for x in v)}"
           for model, parallel, label in (("llama2-70b", "tp4pp2", "LLaMA2-70B TP4-PP2 on A40"),
                                          ("falcon-180b", "tp4pp2", "Falcon-180B TP4-PP2"), ("falcon-180b", "tp8", "Falcon TP-8"))
           if (v := of(model, parallel))]
    small = [f"{label} {_span(v)}" for model, label in (("yi-34b", "Yi-34B"), ("mistral-7b", "Mistral-7B"))
             if (v := [float(x) for k, x in cell.items() if k[0] == model])]
    orca = searches[searches.index.get_level_values("scheduler") == "orca"]
    slow = orca[orca.index.get_level_values(0) == "llama2-70b"]
    orca_probe = p[(p["scheduler"] == "orca") & (p["model"] == "llama2-70b") & p["is_capacity"].astype(bool)]
    worst = orca_probe.loc[orca_probe["hours"].idxmax()] if len(orca_probe) else None
    model, parallel, _, _, sched = searches.idxmax()
    text = (f"the {len(cell)} capacity cells of Figs 10-11 and 13 ({len(searches)} searches, {len(p)} probes) come to "
            f"**{hours:,.0f} hours of serving, {gpu_hours:,.0f} GPU-hours**. The 8-GPU cells dominate: "
            f"{', '.join(big)} GPU-h (strict, relaxed); {', '.join(small[:1])} GPU-h a cell, {', '.join(small[1:])}.")
    if worst is not None and len(slow):
        text += (f" Orca's searches are the long ones ({_span(slow.to_numpy())} h each on LLaMA2-70B: at "
                 f"its capacity, {worst['qps']:.2g} QPS, one probe of {int(worst['num_requests']):,} requests takes "
                 f"{worst['hours']:.0f} h).")
    text += (f" On {NODES} nodes of {NODE_GPUS} GPUs ({NODES * NODE_GPUS} GPUs, one search per deployment at a time) that "
             f"is about {gpu_hours / (NODE_GPUS * NODES):.0f} h of wall time at best ({gpu_hours:,.0f} / {NODES * NODE_GPUS}), "
             f"and no less than the longest search, {float(searches.max()):.0f} h ({style.scheduler_label(sched)} on {model} {parallel}).")
    return text
