"""Capacity figures: Fig. 10-11 (capacity per deployment x dataset x SLO x scheduler), Fig. 12
(capacity vs SLO) and Fig. 13 (Falcon-180B TP-8 vs TP4-PP2) analogs.

Each builder takes the loader's frames, returns a matplotlib Figure, and raises MissingResults
when the frames hold nothing it can draw, so the report can say what to run instead.
"""
from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from harness.analysis import style
from harness.analysis.serve.compare import MAIN_SCHEDULERS, capacity_mode, paper_config
from harness.analysis.serve.headline import figure_label, ratios
from harness.analysis.paper import Paper
from harness.analysis.study import MissingResults  # noqa: F401  (raised here; study.py defines it for every study)


def _ordered(present, order) -> list:
    return [x for x in order if x in set(present)] + sorted(set(present) - set(order))


def _deployment_order(df: pd.DataFrame, paper: Paper | None = None) -> list[tuple]:
    """(model, parallel, gpu, num_gpus) present, in the paper's order (Mistral, Yi, LLaMA2, Falcon), then by size."""
    order = [(d["model"], d["parallel"]) for d in paper.raw.get("deployments", [])] if paper else []
    keys = df[["model", "parallel", "gpu", "num_gpus"]].drop_duplicates()
    rank = [order.index((m, p)) if (m, p) in order else len(order) for m, p in zip(keys["model"], keys["parallel"])]
    keys = keys.assign(_rank=rank).sort_values(["_rank", "num_gpus", "model", "parallel"])
    return [tuple(r) for r in keys.drop(columns="_rank").itertuples(index=False)]


def _off_paper(rows: pd.DataFrame) -> set[tuple]:
    """(dataset, SLO) groups holding a run not at the paper's settings (drawn only when asked)."""
    if "settings" not in rows:
        return set()
    off = rows[rows["settings"].fillna("") != ""]
    return set(zip(off["dataset"], off["slo_tbt_s"]))


def capacity_rows(runs: pd.DataFrame, paper: Paper) -> pd.DataFrame:
    """The rows Fig. 10-11 draws: main schedulers with the paper's knobs on the paper's deployments."""
    runs = capacity_mode(runs)
    if runs.empty:
        return runs
    deps = {(d["model"], d["parallel"]) for d in paper.raw.get("deployments", [])}
    keep = runs["scheduler"].isin(MAIN_SCHEDULERS) & paper_config(runs, paper)
    keep &= pd.Series([(m, p) in deps for m, p in zip(runs["model"], runs["parallel"])], index=runs.index)
    return runs[keep]


def fig_capacity(runs: pd.DataFrame, paper: Paper) -> Figure:
    rows = capacity_rows(runs, paper)
    if rows.empty:
        raise MissingResults("no capacity results of Sarathi/vLLM/Orca on the paper's deployments "
                             "(run e.g. `python -m harness experiment=yi34b_tp2_strict`)")
    pairs = ratios(runs, paper)
    deps = _deployment_order(rows, paper)
    # Each (dataset, SLO) group needs room for its tick label and its two-line ratio annotation.
    most_groups = int(rows.groupby(["model", "parallel"])[["dataset", "slo_tbt_s"]].apply(
        lambda g: len(g.drop_duplicates())).max())
    fig, axes = style.panels(len(deps), width=max(5.2, 2.1 * most_groups), height=4.2)
    schedulers = _ordered(rows["scheduler"], style.SCHEDULER_ORDER)
    for ax, (model, parallel, gpu, ngpu) in zip(axes, deps):
        d = rows[(rows["model"] == model) & (rows["parallel"] == parallel)]
        groups = d[["dataset", "slo_kind", "slo_tbt_s"]].drop_duplicates().sort_values(["dataset", "slo_tbt_s"],
                                                                                      ascending=[False, True])
        width = 0.8 / len(schedulers)
        top = 0.0
        for gi, (dataset, kind, slo) in enumerate(groups.itertuples(index=False)):
            cell = d[(d["dataset"] == dataset) & (d["slo_tbt_s"] == slo)].set_index("scheduler")
            for si, s in enumerate(schedulers):
                if s not in cell.index:
                    continue
                x = gi - 0.4 + width * (si + 0.5)
                cap, sat = float(cell.at[s, "capacity_qps"]), bool(cell.at[s, "saturated"])
                ax.bar(x, cap, width, color=style.scheduler_color(s), hatch="//" if sat else None,
                       edgecolor="white", label=style.scheduler_label(s))
                top = max(top, cap)
            # Reproduced Sarathi/baseline ratio over the group; the paper's value beside it when published
            # (harness.analysis.serve.headline: the rule the README's table follows too).
            lines = []
            if "sarathi" in cell.index:
                for base in ("vllm", "orca"):
                    if base in cell.index and cell.at[base, "capacity_qps"] > 0:
                        r = cell.at["sarathi", "capacity_qps"] / cell.at[base, "capacity_qps"]
                        here = {"model": model, "parallel": parallel, "dataset": dataset, "slo_kind": kind,
                                "baseline": base, "base_parallel": parallel}
                        lines.append(f"{r:.1f}× {style.scheduler_label(base)}" + figure_label(paper, pairs, here))
            if lines:
                ymax = float(cell["capacity_qps"].max())
                ax.annotate("\n".join(lines), (gi, ymax), xytext=(0, 4), textcoords="offset points",
                            ha="center", va="bottom", fontsize=7.5,
                            bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "none", "alpha": 0.85})
        ax.grid(axis="x", visible=False)
        off = _off_paper(d)
        ax.set_xticks(range(len(groups)), [("✱ " if (ds, t) in off else "") + f"{style.dataset_label(ds)}\n{k}\nP99 TBT ≤ {t:g} s"
                                           for ds, k, t in groups.itertuples(index=False)], fontsize=8)
        ax.set_xlim(-0.6, len(groups) - 0.4)
        ax.set_ylim(0, top * 1.35 if top > 0 else 1)
        ax.set(title=style.deployment_label(model, parallel, gpu, ngpu), xlabel="dataset, SLO (P99 TBT)",
               ylabel="capacity (QPS)")
    notes = ["hatched: saturated search (capacity is a lower bound)"] if rows["saturated"].any() else []
    if _off_paper(rows):
        notes.append("✱ not at the paper's settings (see the report)")
    _legend(fig, axes, note="; ".join(notes))
    return style.finish(fig, "Serving capacity under the P99 TBT SLO and median scheduling delay ≤ 2 s (Fig. 10–11 analog)",
                        y=1.02)


def _legend(fig: Figure, axes, note: str = "") -> None:
    handles = {}  # label -> its first handle, in order
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    if handles:
        labels = list(handles)
        fig.legend(list(handles.values()), labels, loc="upper center", bbox_to_anchor=(0.5, -0.01),
                   ncol=min(len(labels), 6 if max(map(len, labels)) < 16 else 3), frameon=False, title=note or None, title_fontsize=8)


def fig_capacity_vs_slo(runs: pd.DataFrame, paper: Paper) -> Figure:
    """Capacity as the P99 TBT SLO loosens, per deployment with at least two SLO values."""
    if runs.empty:
        raise MissingResults("no capacity results")
    runs = capacity_mode(runs)
    rows = runs[runs["scheduler"].isin(MAIN_SCHEDULERS) & paper_config(runs, paper)]
    # A line needs two SLOs of one (deployment, dataset, scheduler); single points say nothing here.
    n_slo = rows.groupby(["model", "parallel", "dataset", "scheduler"])["slo_tbt_s"].transform("nunique")
    rows = rows[n_slo >= 2]
    if rows.empty:
        raise MissingResults("no deployment has capacity results at two or more SLOs "
                             "(run e.g. experiment=yi34b_tp2_strict and experiment=yi34b_tp2_relaxed)")
    # One panel per model and GPU count: a second parallel layout of the same GPUs (Falcon-180B's
    # TP-8, run for vLLM only, Fig. 13's baseline) is a line style in that panel, not a panel alone.
    deps = _deployment_order(rows, paper)
    panels = list(dict.fromkeys((m, gpu, n) for m, _, gpu, n in deps))
    fig, axes = style.panels(len(panels))
    dashes = ["-", "--", ":", "-."]
    many_ds = rows["dataset"].nunique() > 1  # one labelling for every panel: the legend is shared
    for ax, (model, gpu, ngpu) in zip(axes, panels):
        d = rows[(rows["model"] == model) & (rows["gpu"] == gpu) & (rows["num_gpus"] == ngpu)]
        layouts = [p for m, p, g, n in deps if (m, g, n) == (model, gpu, ngpu)]
        styles = [(ds, p) for p in layouts for ds in sorted(d.loc[d["parallel"] == p, "dataset"].unique(), reverse=True)]
        for s in _ordered(d["scheduler"], style.SCHEDULER_ORDER):
            for i, (ds, par) in enumerate(styles):
                g = d[(d["scheduler"] == s) & (d["dataset"] == ds) & (d["parallel"] == par)].sort_values("slo_tbt_s")
                if g.empty:
                    continue
                label = style.scheduler_label(s) + (f" · {style.dataset_label(ds)}" if many_ds else "")
                other_layout = par != layouts[0]  # named beside its line: the shared legend is per scheduler
                ax.plot(g["slo_tbt_s"], g["capacity_qps"], ":" if other_layout else dashes[i % len(dashes)], marker="o",
                        color=style.scheduler_color(s), label="_" + label if other_layout else label)
                if other_layout:
                    ax.annotate(f"{style.scheduler_label(s)} {style.parallel_label(par)}",
                                (g["slo_tbt_s"].iloc[-1], g["capacity_qps"].iloc[-1]), xytext=(-4, 6),
                                textcoords="offset points", ha="right", fontsize=8, color=style.scheduler_color(s))
        style.plain_log(ax, "x")
        slos = sorted(d["slo_tbt_s"].unique())
        ax.set_xticks(slos, [f"{v:g}" for v in slos])
        ax.set_xlim(slos[0] / 1.4, slos[-1] * 1.4)
        ax.set_ylim(bottom=0)
        ax.set_title(f"{style.MODEL_LABELS.get(model, model)} {style.parallel_label(layouts[0])}"
                     + "".join(f" (dotted: {style.parallel_label(p)})" for p in layouts[1:])
                     + f" · {ngpu}× {style.GPU_LABELS.get(gpu, gpu)}")
        ax.set(xlabel="P99 TBT SLO (s, log scale)", ylabel="capacity (QPS)")
    _legend(fig, axes)
    return style.finish(fig, "Capacity vs P99 TBT SLO (Fig. 12 analog)", y=1.02)


def _pipeline_claim_lines(runs: pd.DataFrame, paper: Paper, model: str, kind: str) -> list[str]:
    """'4.3× over vLLM TP-8 (paper 4.3×)' for each published cross-deployment claim at this SLO."""
    from harness.analysis.serve.compare import capacity_ratio_row

    out = []
    for c in paper.capacity_ratios:
        n, d = c.numerator, c.denominator
        if c.match != "cell" or n.model != model or n.slo_kind != kind or not isinstance(d.scheduler, str):
            continue
        row = capacity_ratio_row(runs, c)
        if row["within"] is None:
            continue
        out.append(f"{style.scheduler_label(n.scheduler)} {style.parallel_label(n.parallel)}: {row['reproduced']:.1f}× "
                   f"{style.scheduler_label(d.scheduler)} {style.parallel_label(d.parallel)} (paper {c.value:g}×)")
    return out


def fig_pipeline(runs: pd.DataFrame, probes: pd.DataFrame, paper: Paper) -> Figure:
    runs = capacity_mode(runs)
    # A model with results on a pipeline-parallel and a TP-only deployment (Falcon-180B preferred).
    both = runs.groupby("model")["pp"].agg(lambda s: s.gt(1).any() and s.eq(1).any()) if not runs.empty else pd.Series(dtype=bool)
    models = list(both[both].index)
    model = ("falcon-180b" if "falcon-180b" in models else models[0]) if models else None
    if model is None:
        raise MissingResults("no model with results on both a TP-only and a pipeline-parallel deployment "
                             "(run e.g. experiment=falcon180b_tp4pp2_strict and the same with "
                             "parallel=tp8 name=falcon180b_tp8_strict scheduler=[vllm])")
    r = runs[(runs["model"] == model) & runs["scheduler"].isin(MAIN_SCHEDULERS)]
    r = r[paper_config(r, paper)]
    fig, axes = style.new_figure(2, width=5.6, height=4.0)
    ax = axes[0][0]
    combos = sorted(set(zip(r["scheduler"], r["parallel"])), key=lambda sp: (style.SCHEDULER_ORDER.index(sp[0]), sp[1]))
    kinds = r[["slo_kind", "slo_tbt_s"]].drop_duplicates().sort_values("slo_tbt_s")
    width = 0.8 / max(len(combos), 1)
    claim_lines: list[str] = []
    for ki, (kind, slo) in enumerate(kinds.itertuples(index=False)):
        cell = r[r["slo_tbt_s"] == slo]
        for ci, (s, par) in enumerate(combos):
            hit = cell[(cell["scheduler"] == s) & (cell["parallel"] == par)]
            if hit.empty:
                continue
            x = ki - 0.4 + width * (ci + 0.5)
            ax.bar(x, float(hit["capacity_qps"].iloc[0]), width, color=style.scheduler_color(s),
                   hatch=None if "pp" in par else "..", edgecolor="white",
                   label=f"{style.scheduler_label(s)} {style.parallel_label(par)}")
        claim_lines += [f"{kind}: {line}" for line in _pipeline_claim_lines(r, paper, model, kind)]
    ax.grid(axis="x", visible=False)
    ax.set_xticks(range(len(kinds)), [f"{k} ({t:g} s)" for k, t in kinds.itertuples(index=False)])
    ax.set_xlim(-0.6, len(kinds) - 0.4)
    ax.set_ylim(0, float(r["capacity_qps"].max()) * 1.5)
    ax.set(xlabel="SLO (P99 TBT)", ylabel="capacity (QPS)",
           title=f"{style.MODEL_LABELS.get(model, model)}: capacity by parallelism")
    handles = dict(zip(*reversed(ax.get_legend_handles_labels())))  # label -> handle, one per combo
    ax.legend(list(handles.values()), list(handles), fontsize=8, title="dotted: TP only", title_fontsize=8,
              loc="upper center", ncol=2)
    if claim_lines:  # below the axes: inside, the lines collide with bars and legend at README size
        ax.text(0.0, -0.3, "\n".join(claim_lines), transform=ax.transAxes, ha="left", va="top", fontsize=8)

    ax = axes[0][1]
    p = probes[(probes["model"] == model) & probes["scheduler"].isin(MAIN_SCHEDULERS)] if not probes.empty else probes
    # A probe's latencies depend on the rate, not on the SLO it was judged against: pool both SLOs' searches.
    for s, par in combos:
        g = (p[(p["scheduler"] == s) & (p["parallel"] == par)].groupby("qps", as_index=False)["tbt_p50_s"].median())
        if g.empty:
            continue
        ax.plot(g["qps"], g["tbt_p50_s"], "-" if "pp" in par else ":", marker="o", ms=4,
                color=style.scheduler_color(s), label=f"{style.scheduler_label(s)} {style.parallel_label(par)}")
    style.plain_log(ax, "x")
    ax.set(xlabel="load (QPS, log scale)", ylabel="median TBT (s)")
    ax.set_ylim(bottom=0)
    ax.set_title("median TBT vs load")
    ax.legend(fontsize=8)
    return style.finish(fig, f"Pipeline vs cross-node tensor parallelism, {style.MODEL_LABELS.get(model, model)} "
                             "(Fig. 13 analog)", y=1.02)
