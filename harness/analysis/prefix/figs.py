"""Conversations and agents with and without prefix caching (issue 30): the study's runs
(harness.analysis.prefix.matrix.prefix_cells) as one figure and one table, and its part of
figures/REPORT.md (that table and the answer it gives).

The question: when most of every prompt is already cached, does chunked prefill still buy capacity
under a TBT SLO, and which token budget now? Per workload and SLO: Sarathi-Serve's capacity over
its token budget, with and without the cache, against vLLM and Orca; the table gives the best
budget, the capacities, Sarathi-Serve's ratio over each baseline and the cache's token hit rate at
Sarathi-Serve's capacity.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from harness.analysis import style
from harness.analysis.figures import PREFIX_RUN, Inputs
from harness.analysis.loader import at_capacity
from harness.analysis.study import MissingResults, Part, Source
from harness.analysis.tables import markdown

WORKLOADS = ("conversations", "agents")
SLOS = ("strict", "relaxed")
WORKLOAD_LABELS = {"conversations": "ShareGPT conversations", "agents": "agent transcripts"}


def prefix_rows(runs: pd.DataFrame, probes: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per (run, scheduler) of the study: its workload, SLO, cache on/off and, from the
    probe at its capacity, the cache's token hit rate."""
    if runs.empty:
        return runs.assign(workload=[], slo=[], cached=[], hit_rate=[])
    parts = runs["experiment"].astype(str).str.extract(PREFIX_RUN)
    rows = pd.concat([runs.reset_index(drop=True), parts.reset_index(drop=True)], axis=1).dropna(subset=["workload"])
    rows = rows[rows["mode"] == "capacity"].copy()
    rows["cached"] = rows["cache"] == "cache"
    rows["hit_rate"] = ([at_capacity(probes, r.run_dir, r.scheduler, "cache_token_hit_rate") for r in rows.itertuples()]
                        if probes is not None else np.nan)
    return rows


def fig_prefix(runs: pd.DataFrame, probes: pd.DataFrame) -> Figure:
    rows = prefix_rows(runs, probes)
    if rows.empty:
        raise MissingResults("no prefix-caching study runs (harness.analysis.prefix.matrix.prefix_cells; "
                             "`python -m harness figure=all` runs them)")
    workloads = [w for w in WORKLOADS if w in set(rows["workload"])]
    slos = [s for s in SLOS if s in set(rows["slo"])]
    fig, axes = style.new_figure(len(slos), len(workloads), width=4.4, height=3.3)
    for r, w in enumerate(workloads):
        for c, slo in enumerate(slos):
            ax = axes[r][c]
            d = rows[(rows["workload"] == w) & (rows["slo"] == slo)]
            if d.empty:
                ax.set_axis_off()
                ax.text(0.5, 0.5, f"{WORKLOAD_LABELS[w]} · {slo}: no runs", ha="center", va="center", fontsize=8)
                continue
            for cached, line in ((True, "-"), (False, ":")):
                e = d[d["cached"] == cached]
                s = e[e["policy"] == "sarathi"].sort_values("token_budget")
                tag = "cache" if cached else "no cache"
                if len(s):
                    ax.plot(s["token_budget"], s["capacity_qps"], line, marker="o", color=style.scheduler_color("sarathi"),
                            label=f"Sarathi-Serve, {tag}")
                for base in ("vllm", "orca"):
                    b = e[e["policy"] == base]
                    if len(b):
                        ax.axhline(float(b["capacity_qps"].iloc[0]), ls=line, color=style.scheduler_color(base),
                                   label=f"{style.scheduler_label(base)}, {tag}")
            ax.set_xscale("log", base=2)
            style.plain_log(ax, "y")
            ax.set_xticks([256, 512, 1024, 2048], ["256", "512", "1024", "2048"])
            ax.xaxis.set_minor_formatter(NullFormatter())
            slo_s = float(d["slo_tbt_s"].iloc[0])
            ax.set_title(f"{WORKLOAD_LABELS[w]} · {slo} (P99 TBT ≤ {slo_s:g} s)", fontsize=8)
            ax.set_xlabel("Sarathi-Serve token budget")
            if c == 0:
                ax.set_ylabel("capacity (QPS)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=7, frameon=False)
    return style.finish(fig, rect=(0, 0.08, 1, 1))


def prefix_table(runs: pd.DataFrame, probes: pd.DataFrame) -> pd.DataFrame:
    """Per workload, SLO and cache: the best budget and Sarathi-Serve's capacity there, each
    budget's, vLLM's and Orca's, Sarathi-Serve's ratio over each, and the hit rate at its capacity."""
    rows = prefix_rows(runs, probes)
    out = []
    for (w, slo, cached), d in rows.groupby(["workload", "slo", "cached"], sort=False):
        s = d[d["policy"] == "sarathi"].sort_values("token_budget")
        if s.empty:
            continue
        top = s.loc[s["capacity_qps"].idxmax()]
        entry = {"workload": WORKLOAD_LABELS.get(w, w), "SLO": f"{slo} ({float(d['slo_tbt_s'].iloc[0]):g} s)",
                 "prefix cache": "on" if cached else "off",
                 **{f"budget {int(b)}": float(c) for b, c in zip(s["token_budget"], s["capacity_qps"])},
                 "best budget": int(top["token_budget"])}
        for base in ("vllm", "orca"):
            b = d[d["policy"] == base]
            cap = float(b["capacity_qps"].iloc[0]) if len(b) else np.nan
            entry[style.scheduler_label(base)] = cap
            entry[f"best / {style.scheduler_label(base)}"] = float(top["capacity_qps"]) / cap if cap > 0 else np.nan
        entry["hit rate at best"] = float(top["hit_rate"])
        out.append(entry)
    return pd.DataFrame(out)


def prefix_markdown(table: pd.DataFrame) -> str:
    if table.empty:
        return "_No prefix-caching study runs._"

    def cell(col: str, v) -> str:
        if not isinstance(v, float):
            return str(v)
        return f"{v:.0%}" if col == "hit rate at best" else f"{v:.2f}x" if col.startswith("best /") else f"{v:.3g}"

    cols = list(table.columns)
    return markdown([tuple(cell(c, v) for c, v in zip(cols, row)) for row in table.itertuples(index=False)], tuple(cols))


def prefix_answer(table: pd.DataFrame) -> str:
    """The study's answer in words, from its table: per workload and SLO, the best budget and
    Sarathi-Serve's margin over vLLM with the cache, beside the same without it."""
    if table.empty:
        return ""
    vllm = f"best / {style.scheduler_label('vllm')}"
    orca = f"best / {style.scheduler_label('orca')}"
    lines = ["**When most of every prompt is already cached, does chunked prefill still buy capacity under a TBT "
             "SLO, and which token budget now?**", ""]
    for (w, slo), d in table.groupby(["workload", "SLO"], sort=False):
        on, off = d[d["prefix cache"] == "on"], d[d["prefix cache"] == "off"]
        if on.empty:
            continue
        a = on.iloc[0]
        best_a = a["best budget"]
        text = (f"- {w}, {slo}: with the cache ({a['hit rate at best']:.0%} of prompt tokens found), Sarathi-Serve's "
                f"best budget is {best_a} at {a[f'budget {best_a}']:.3g} QPS, {a[vllm]:.2f}x vLLM and {a[orca]:.2f}x Orca")
        if not off.empty:
            b = off.iloc[0]
            best_b = b["best budget"]
            text += (f"; without it {b[vllm]:.2f}x and {b[orca]:.2f}x at budget {best_b} "
                     f"({b[f'budget {best_b}']:.3g} QPS)")
        lines.append(text + ".")
    return "\n".join(lines)


def parts(inputs: Inputs, outcomes: tuple, source: Source) -> tuple[Part, ...]:
    if inputs.prefix.empty:
        return ()
    table = prefix_table(inputs.prefix, inputs.prefix_probes)
    return (Part(("## Beyond the paper: conversations, agents and prefix caching", "",
                  "Capacity (QPS) under the paper's criterion, per workload, SLO and prefix cache (fig18): "
                  "Sarathi-Serve at each token budget, vLLM and Orca, Sarathi-Serve's best over each, and the share "
                  "of prompt tokens the cache held at Sarathi-Serve's capacity.", "",
                  prefix_markdown(table), "", prefix_answer(table), ""), "workloads"),)
