"""The first Sarathi paper's profiling figure quantities beside the performance model: its table of three
basic batches (linear and attention time, paper against model, the attention inputs marked) and a
decode token's cost over a prefill token's against the batch size, with the paper's three points.
Model arithmetic only (operator_table.py), no run."""
from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from harness.analysis import style
from harness.analysis.sarathi23.claims import _perf
from harness.analysis.sarathi23.figures import A6000, PUBLISHED, Study, bar_labels
from harness.analysis.sarathi23.operator_table import batch_ms, cost_ratio

# The table's batches: label, and the claim ids of its linear and attention rows
TABLE_ROWS = (("prefill 1,024", "op_prefill_linear", "op_prefill_attention"),
              ("decode 4 at 1,024", "op_decode_linear", "op_decode_attention"),
              ("1,021 + 3 decodes", "op_hybrid_linear", "op_hybrid_attention"))
RATIO_CLAIMS = ("cost_ratio_b1", "cost_ratio_b2", "cost_ratio_b18")


def fig_operator_table(s: Study) -> Figure:
    perf = _perf(*A6000)
    fig, axes = style.new_figure(2, width=5.4)
    ax, ax2 = axes[0]
    x = np.arange(len(TABLE_ROWS))
    for k, (part, color) in enumerate((("linear", "tab:blue"), ("attention", "tab:orange"))):
        claims = [s.claim(row[1 + k]) for row in TABLE_ROWS]
        model = [batch_ms(perf, c.params["batch"], part) for c in claims]
        bars = ax.bar(x + (k - 0.5) * 0.38, model, 0.38, color=color, label=f"model: {part}",
                      hatch=["//" if c.role == "input" else "" for c in claims])
        bar_labels(ax, bars, "{:.1f}", fontsize=7)
        ax.scatter(x + (k - 0.5) * 0.38, [c.value for c in claims], marker="x", color=PUBLISHED, zorder=3)
    ax.scatter([], [], marker="x", color=PUBLISHED, label="published")
    handles, _ = ax.get_legend_handles_labels()
    handles.append(Patch(facecolor="white", edgecolor="0.3", hatch="//", label="input of the model"))
    ax.set_yscale("log")
    ax.set_xticks(x, [row[0] for row in TABLE_ROWS], fontsize=8)
    ax.set(ylabel="time of the batch, 40 layers (ms)", title="LLaMA-13B, RTX A6000: the three basic batches")
    ax.legend(handles=handles, fontsize=7)
    batches = np.array([1, 2, 4, 6, 8, 12, 18, 24, 30])
    ax2.plot(batches, [cost_ratio(perf, int(b), 1024) for b in batches], marker="o", label="model")
    for cid in RATIO_CLAIMS:
        c = s.claim(cid)
        ax2.scatter([c.params["batch_size"]], [c.value], marker="x", color=PUBLISHED, zorder=3)
    ax2.scatter([], [], marker="x", color=PUBLISHED, label="published")
    ax2.set(xscale="log", yscale="log", xlabel="batch size (sequences of 1,024 tokens)",
            ylabel="decode token's cost / prefill token's", title="a decode token costs ~200x / B a prefill token")
    ax2.legend(fontsize=8)
    return fig
