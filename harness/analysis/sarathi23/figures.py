"""The first Sarathi paper's figures, from its offline runs (sarathi23/runs.py) and, where the
paper's figure is of one iteration's cost, from the performance model. Their specs are
the study's `FIGURES` (sarathi23/__init__.py; `python -m harness figure=NAME`); a figure whose runs are missing is skipped with the
reason (MissingResults), as the Sarathi-Serve figures are."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from harness.analysis import style
from harness.analysis.study import MissingResults
from harness.analysis.sarathi23 import matrix
from harness.analysis.sarathi23.claims import Claim, _perf, model_value, pipeline_table

A6000 = ("llama-13b", "rtx-a6000", "sarathi-2023")  # the paper's microbenchmark deployment
PUBLISHED = "black"
PER_CALL = "xformers-2023-percall"  # engines/perf/kernels.py: the operator table's kernel with a per-call cost


@dataclass(frozen=True)
class Study:
    """What the figures read: the drawn runs and the published claims (and, for the report's
    section, the runs drawn with those left out: runs.StudyRuns)."""

    runs: pd.DataFrame
    claims: tuple[Claim, ...]
    drawn: Any = None

    def claim(self, cid: str) -> Claim:
        return next(c for c in self.claims if c.id == cid)

    def rows(self, prefix: str, exact: bool = False) -> pd.DataFrame:
        """The runs of the cell `prefix` (exact) or of every cell whose name starts with it."""
        names = self.runs["experiment"] if not self.runs.empty else pd.Series(dtype=str)
        hit = self.runs[(names == prefix) if exact else names.str.startswith(prefix)] if not self.runs.empty else self.runs
        if hit.empty:
            raise MissingResults(f"no offline runs of {prefix}* (python -m harness figure=all runs them)")
        return hit


def bar_labels(ax, bars, fmt="{:.2f}x", fontsize: float = 8) -> None:
    for b in bars:
        h = b.get_height()
        if np.isfinite(h):
            ax.annotate(fmt.format(h), (b.get_x() + b.get_width() / 2, h), ha="center", va="bottom", fontsize=fontsize)


def fig_decode_speedup(s: Study) -> Figure:
    from engines.perf.queries import decode_speedup

    c = s.claim("decode_speedup_max").params
    perf = _perf(*A6000)
    fig, axes = style.new_figure(1, width=6.0)
    ax = axes[0][0]
    for ctx in c["contexts"]:
        bs = [b for b in c["batches"] if b * ctx <= perf.kv_capacity_tokens(1.0)]
        ax.plot(bs, [decode_speedup(perf, b, ctx, c["chunk"], c["tile"]) for b in bs], marker="o", label=f"model, {ctx // 1024}K")
    for cid, ctx in (("decode_speedup_llama13b_1k", "1K"), ("decode_speedup_llama13b_2k", "2K")):
        claim, b = s.claim(cid), 6
        ax.scatter([b], [claim.value], marker="x", color=PUBLISHED, zorder=3)
        run = s.runs[(s.runs["experiment"] == claim.params["experiment"]) & (s.runs["scheduler"] == "decode_maximal")]
        if not run.empty:
            ax.scatter([b], [run["decode_speedup"].iloc[-1]], marker="D", facecolors="none", edgecolors="C3", zorder=3)
    ax.scatter([], [], marker="x", color=PUBLISHED, label="published (B 6, P:D 50)")
    ax.scatter([], [], marker="D", facecolors="none", edgecolors="C3", label="offline run (iteration log)")
    ax.axhspan(2.8, 10, color="0.9", zorder=0, label="published range 2.8x-10x (same definition)")
    ax.set(xlabel="batch size B (1 prefill chunk + B - 1 decodes)",
           ylabel="decode speedup: decode-only batch of B per token\n/ marginal cost of the B - 1 riding on a chunk",
           title="LLaMA-13B, RTX A6000, chunk 256 (tile-aligned)")
    ax.legend(fontsize=8)
    return fig


def fig_throughput_gain(s: Study) -> Figure:
    rows = []
    for name in matrix.GAIN_ROWS:
        run = s.rows(name, exact=True)
        run = run[run["scheduler"] == "decode_maximal"].iloc[-1]
        label = f"{style.MODEL_LABELS.get(run['model'], run['model'])}\n{run['sequence_length'] // 1024}K, B {int(run['batch'])}"
        tail = name.removeprefix("sarathi23_gain_")
        rows.append({"row": label, "gain": run["gain"], "speedup": run["decode_speedup"],
                     "gain_paper": s.claim(f"gain_{tail}").value, "speedup_paper": s.claim(f"decode_speedup_{tail}").value})
    t = pd.DataFrame(rows)
    fig, axes = style.new_figure(2, width=4.6)
    x = np.arange(len(t))
    for ax, col, title in ((axes[0][0], "gain", "throughput gain over the baseline"),
                           (axes[0][1], "speedup", "decode speedup")):
        bar_labels(ax, ax.bar(x - 0.2, t[f"{col}_paper"], 0.4, color="0.75", label="published"))
        bar_labels(ax, ax.bar(x + 0.2, t[col], 0.4, color=style.scheduler_color("decode_maximal"), label="reproduced"))
        ax.set_xticks(x, t["row"], fontsize=8)
        ax.set(title=title, ylabel="x")
        ax.legend(fontsize=8)
    return fig


def fig_pd_sweep(s: Study) -> Figure:
    fig, axes = style.new_figure(2, width=4.8)
    ax, ax2 = axes[0]
    for (chunk, batch) in matrix.SWEEPS:
        rows = s.rows(f"sarathi23_pd_c{chunk}_b{batch}_pd")
        dm = rows[rows["scheduler"] == "decode_maximal"].sort_values("pd_ratio")
        line, = ax.plot(dm["pd_ratio"], dm["gain"], marker="o", ms=3, label=f"C {chunk}, B {batch}")
        ax.axvline(chunk / (batch - 1), color=line.get_color(), ls=":", lw=1)
        if (chunk, batch) == (256, 18):
            for name in ("decode_maximal", "orca_worst"):
                r = rows[rows["scheduler"] == name].sort_values("pd_ratio")
                ax2.plot(r["pd_ratio"], r["token_throughput"], marker="o", ms=3, color=style.scheduler_color(name),
                         label=style.scheduler_label(name))
    peak = s.claim("pd_peak_c256_b18")
    ax.axvline(peak.value, color=PUBLISHED, lw=1.5, ls="--", label=f"published peak (C 256, B 18): {peak.value:g}")
    for a in (ax, ax2):
        style.plain_log(a)
        a.set_xlabel("P:D ratio (prompt / output tokens)")
    ax.set(ylabel="throughput gain over the baseline", title="gain peaks near P:D = C / (B - 1) (dotted)")
    ax2.set(ylabel="tokens / s", title="C 256, B 18: throughput")
    ax.legend(fontsize=7)
    ax2.legend(fontsize=8)
    return fig


def fig_orca(s: Study) -> Figure:
    fig, axes = style.new_figure(1, width=6.0)
    ax = axes[0][0]
    x = np.arange(len(matrix.SEQUENCE_LENGTHS))
    runs = [s.rows(matrix.orca_name(length), exact=True) for length in matrix.SEQUENCE_LENGTHS]
    for i, name in enumerate(("orca_best", "decode_maximal")):
        gains = [float(r[r["scheduler"] == name]["gain"].iloc[-1]) for r in runs]
        bar_labels(ax, ax.bar(x + (i - 0.5) * 0.38, gains, 0.38, color=style.scheduler_color(name),
                               label=style.scheduler_label(name)))
    pub = [(0, "orca_best_1k", -0.19)] + [(k, f"sarathi_vs_orca_{k + 1}k", 0.19) for k in range(3)]
    for k, cid, dx in pub:
        ax.scatter([k + dx], [s.claim(cid).value], marker="x", color=PUBLISHED, zorder=3)
    ax.scatter([], [], marker="x", color=PUBLISHED, label="published")
    ax.axhline(1.0, color="0.4", lw=1)
    ax.set_xticks(x, [f"{n // 1024}K" for n in matrix.SEQUENCE_LENGTHS])
    ax.set(xlabel="sequence length", ylabel="throughput over the baseline (Orca worst case)",
           title="LLaMA-13B, RTX A6000, B 10, P:D 28")
    ax.legend(fontsize=8)
    return fig


def fig_pipeline(s: Study) -> Figure:
    pp, rep = s.rows(matrix.PIPELINE, exact=True), s.rows(matrix.REPLICAS, exact=True)
    short = {"orca_best": "Orca-style", "decode_maximal": "Sarathi"}
    layouts = [(f"TP8-PP8\n{short[n]}", pp, n) for n in short] + [(f"8 x TP-8\n{short[n]}", rep, n) for n in short]
    fig, axes = style.new_figure(3, width=5.2)
    ax, ax2, ax3 = axes[0]
    done = [(label, float(df[df["scheduler"] == n]["makespan_s"].iloc[-1])) for label, df, n in layouts
            if (df["scheduler"] == n).any()]
    colors = [style.scheduler_color(n) for _, df, n in layouts if (df["scheduler"] == n).any()]
    bars = ax.bar(range(len(done)), [t for _, t in done], color=colors)
    bar_labels(ax, bars, "{:.0f} s")
    ax.set_xticks(range(len(done)), [lab for lab, _ in done], fontsize=8)
    ax.set(ylabel="completion time of every request (s)", title="GPT-3 175B on 64 A100s, 10,000 requests")
    bottom = np.zeros(2)
    names = ("orca_best", "decode_maximal")
    last = [pp[pp["scheduler"] == n].iloc[-1] for n in names]
    for cause in ("schedule", "send", "upstream"):
        vals = [r["bubble_p50_s"] * (r["bubble_share"] or {}).get(cause, 0.0) for r in last]
        ax2.bar(range(2), vals, bottom=bottom, label=cause)
        bottom += vals
    ax2.set_xticks(range(2), [f"TP8-PP8\n{short[n]}" for n in names], fontsize=8)
    ax2.set(ylabel="median bubble time a request (s), split by cause", title="TP8-PP8: pipeline bubbles")
    ax2.legend(fontsize=8, title="cause (share of all bubble time)", title_fontsize=8)
    _pipeline_ratios(ax3, pipeline_table(s.claims, s.runs, matrix.CPU_COSTS))
    return fig


def _pipeline_ratios(ax, table: pd.DataFrame) -> None:
    """The four published ratios of Sec. 5.4 beside ours under each CPU-cost choice."""
    x = np.arange(len(table))
    labels = ["bubbles\nOrca / Sarathi", "replicas faster\nthan Orca", "Sarathi faster\nthan Orca",
              "Sarathi faster\nthan replicas"]
    series = [("published", "published", "0.75")] + [(c, f"ours, perf.cpu_costs={c}", f"C{i}") for i, c in enumerate(matrix.CPU_COSTS)]
    w = 0.8 / len(series)
    for i, (col, label, color) in enumerate(series):
        bar_labels(ax, ax.bar(x + (i - (len(series) - 1) / 2) * w, table[col], w, color=color, label=label), "{:.2f}")
    ax.set_yscale("log")
    ax.axhline(1.0, color="0.4", lw=1)
    ax.set_xticks(x, labels[:len(table)], fontsize=7)
    ax.set(ylabel="ratio (x)", title="Sec. 5.4: published vs reproduced")
    ax.legend(fontsize=7)


def fig_chunk_size(s: Study) -> Figure:
    fig, axes = style.new_figure(2, width=4.8)
    ax, ax2 = axes[0]
    chunks = [64, 128, 256, 512]
    base = {"model": A6000[0], "gpu": A6000[1], "stack": A6000[2], "prompt": 1024}
    for metric, label in (("prefill_ratio", "prefill time"), ("attention_ratio", "attention time")):
        ax.plot(chunks, [model_value({**base, "metric": metric, "chunk": c}) for c in chunks], marker="o", label=f"model: {label}")
    # the what-if that names the chunk-64 attention miss's cause: a per-call cost the operator table cannot measure
    ax.plot(chunks, [model_value({**base, "metric": "attention_ratio", "chunk": c}, PER_CALL) for c in chunks], ls="--",
            color="tab:orange", label=f"what-if {PER_CALL}: attention")
    for cid, c in (("chunk64_prefill", 64), ("chunk64_attention", 64), ("chunk256_prefill_loss", 256), ("chunk512_prefill_loss", 512)):
        claim = s.claim(cid)
        ax.scatter([c], [claim.value + (1 if claim.params["metric"] == "prefill_loss" else 0)], marker="x", color=PUBLISHED, zorder=3)
    ax.scatter([], [], marker="x", color=PUBLISHED, label="published")
    bound = s.claim("chunk128_prefill")  # "over 2x": a lower bound, drawn as one
    ax.scatter([bound.params["chunk"]], [bound.value], marker="^", color=PUBLISHED, zorder=3,
               label=f"published: prefill over {bound.value:g}x (C {bound.params['chunk']})")
    ax.axhline(1.0, color="0.4", lw=1)
    style.plain_log(ax)
    ax.set(xlabel="chunk size C", ylabel="chunked / unchunked (1K prompt)", title="LLaMA-13B, RTX A6000: cost of chunking")
    ax.legend(fontsize=8)
    for chunk in (64, 128, 256, 512):
        rows = s.rows(f"sarathi23_pd_c{chunk}_b18_pd")
        dm = rows[rows["scheduler"] == "decode_maximal"].sort_values("pd_ratio")
        ax2.plot(dm["pd_ratio"], dm["gain"], marker="o", ms=3, label=f"C {chunk}")
    ax2.axhline(s.claim("chunk128_gain").value, color=PUBLISHED, ls="--", lw=1, label="published: C 128 up to 1.16x")
    style.plain_log(ax2)
    ax2.set(xlabel="P:D ratio", ylabel="throughput gain over the baseline", title="B 18: gain by chunk size")
    ax2.legend(fontsize=8)
    return fig


def fig_composition(s: Study) -> Figure:
    rows = s.rows("sarathi23_pd_c256_b18_pd")
    dm = rows[rows["scheduler"] == "decode_maximal"].sort_values("pd_ratio")
    fig, axes = style.new_figure(1, width=6.0)
    ax = axes[0][0]
    ax.plot(dm["pd_ratio"], dm["hybrid_time_share"], marker="o", ms=3, label="time in hybrid iterations")
    ax.plot(dm["pd_ratio"], dm["piggybacked_share"], marker="s", ms=3, label="decode tokens riding on a chunk")
    ax.plot(dm["pd_ratio"], dm["decodes_per_hybrid"] / 17, marker="^", ms=3, label="decodes a hybrid iteration / (B - 1)")
    ax.axvline(256 / 17, color="0.4", ls=":", lw=1)
    style.plain_log(ax)
    ax.set(xlabel="P:D ratio", ylabel="share", ylim=(0, 1.05), title="decode-maximal batches, C 256, B 18 (iteration log)")
    ax.legend(fontsize=8)
    return fig


def fig_tile(s: Study) -> Figure:
    from harness.analysis.perf_model.perf_figures import fig_tile_quantization

    return fig_tile_quantization(_perf(*A6000), label="LLaMA-13B, RTX A6000", max_tokens=768)
