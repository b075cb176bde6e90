"""The fleet study's figures (its `__init__` names them), drawn from `FleetResults` only."""
from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from harness.analysis import style
from harness.analysis.study import MissingResults
from harness.analysis.fleet.cells import NOCACHE, ROUTERS, TIERS, WORKLOADS
from harness.analysis.fleet.load import FleetResults
from harness.analysis.fleet.table import fleet_table

ROUTER_LABELS = {"least_outstanding": "load only", "session_affinity": "session affinity", "prefix_aware": "prefix-aware",
                 "prefix_exact": "prefix-exact"}
WORKLOAD_LABELS = {"chat": "chat (ShareGPT conversations)", "agents": "agents (agent transcripts)"}
POLICIES = ("sarathi", "vllm")


def _bars(results: FleetResults, column: str, ylabel: str, annotate: bool) -> Figure:
    table = fleet_table(results.rows)
    if table.empty:
        raise MissingResults("no fleet study runs (harness/analysis/fleet/cells.py; `python -m harness figure=all` runs them)")
    workloads = [w for w in WORKLOADS if w in set(table["workload"])]
    fig, axes = style.new_figure(len(workloads), 1, width=5.2, height=3.6)
    width = 0.8 / (len(POLICIES) * len(TIERS))
    for ax, w in zip(axes[0], workloads):
        d = table[table["workload"] == w]
        x = np.arange(len(ROUTERS))
        for i, (p, tier) in enumerate((p, t) for p in POLICIES for t in TIERS):
            e = d[(d["policy"] == p) & (d["tier"] == tier)].set_index("router").reindex(list(ROUTERS))
            pos = x - 0.4 + width * (i + 0.5)
            ax.bar(pos, e[column], width, color=style.scheduler_color(p), hatch="//" if tier == "offload" else None,
                   edgecolor="white", label=f"{style.scheduler_label(p)}, {'host tier' if tier == 'offload' else 'GPU only'}")
            for xi, v, hit, starved in zip(pos, e[column], e["hit_rate"], e["starved"].fillna(False)):
                if annotate and np.isfinite(v):
                    ax.text(xi, v, (f"{hit:.0%}" if np.isfinite(hit) else "") + ("!" if starved else ""), ha="center",
                            va="bottom", fontsize=6)
        off = d[d["tier"] == NOCACHE]
        for p in POLICIES if column == "capacity_qps" else ():
            hit = off[off["policy"] == p]
            if len(hit):
                ax.axhline(float(hit[column].iloc[0]), ls=":", color=style.scheduler_color(p),
                           label=f"{style.scheduler_label(p)}, prefix caching off")
        ax.set_xticks(x)
        ax.set_xticklabels([ROUTER_LABELS[r] for r in ROUTERS])
        ax.set_title(WORKLOAD_LABELS[w], fontsize=9)
        ax.set_ylabel(ylabel)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    return fig


def fig_capacity(results: FleetResults) -> Figure:
    return _bars(results, "capacity_qps", "fleet capacity (QPS)", annotate=True)


def fig_gpu_hours(results: FleetResults) -> Figure:
    return _bars(results, "gpu_hours", "GPU-hours a day", annotate=False)

