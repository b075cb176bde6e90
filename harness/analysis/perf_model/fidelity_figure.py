"""The performance model against measured operators: predicted vs measured time per operator family.

Built from the committed sample of Vidur's profiles (data/perf/vidur_operator_sample.csv; the
full profiles are not needed) and priced by the model at build time through
harness.analysis.perf_model.operator_fidelity.price, the code benchmarks/validate_operators.py prices every
point with: the figure moves when the model moves.

    from harness.analysis.perf_model.fidelity_figure import fig_operator_fidelity
    fig = fig_operator_fidelity()                       # default stack vs `ideal`
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from engines.perf.kernels import DEFAULT_STACK
from harness.analysis import style
from harness.analysis.perf_model.operator_fidelity import GEMM_OPS, mape_pct, price
from harness.analysis.perf_model.vidur_points import load_sample

_MS = 1e3
PANELS = (  # (title, families pooled in the panel)
    ("GEMMs: QKV, attn-out, MLP up, down", tuple(GEMM_OPS)),
    ("Elementwise: norms, add, rotary, act.", ("elementwise",)),
    ("Embedding", ("embedding",)),
    ("Prefill attention (Llama-2-70B TP2)", ("attn_prefill",)),
    ("Decode attention (Llama-2-70B TP2)", ("attn_decode",)),
    ("All-reduce", ("all_reduce",)),
    ("Send/recv", ("send_recv",)),
)
WHERE = {  # Vidur GPU / network directory -> (legend label, colour index)
    "a100": ("A100 80GB PCIe", 0),
    "a40": ("A40 48GB", 1),
    "a100_pairwise_nvlink": ("A100 servers: NVLink pairs", 2),
    "a100_dgx": ("DGX A100 (NVSwitch, IB)", 4),
    "a40_pairwise_nvlink": ("A40 server", 3),
}


def _log_axes(ax, lo: float, hi: float) -> None:
    """Both axes log over [lo, hi], ticks at decades labelled as plain numbers."""
    fmt = FuncFormatter(lambda v, _: f"{v:g}")
    for axis, scale, lim in ((ax.xaxis, ax.set_xscale, ax.set_xlim), (ax.yaxis, ax.set_yscale, ax.set_ylim)):
        scale("log")
        lim(lo, hi)
        axis.set_major_locator(LogLocator(base=10, numticks=12))
        axis.set_major_formatter(fmt)
        axis.set_minor_formatter(NullFormatter())
    ax.set_aspect("equal", adjustable="box")


def _panel(ax, pts: pd.DataFrame, other: pd.DataFrame, title: str, colors, stack: str, compare: str) -> None:
    meas, pred = pts["measured_s"].to_numpy() * _MS, pts["predicted_s"].to_numpy() * _MS
    lo, hi = min(meas.min(), pred.min()) / 1.6, max(meas.max(), pred.max()) * 1.6
    ax.fill_between([lo, hi], [lo / 1.2, hi / 1.2], [lo * 1.2, hi * 1.2], color="0.85", lw=0, zorder=0,
                    label="±20 %")
    for gpu, g in pts.groupby("gpu", sort=False):
        label, ci = WHERE.get(gpu, (gpu, 5))
        ax.scatter(g["measured_s"] * _MS, g["predicted_s"] * _MS, s=7, alpha=0.55, lw=0, color=colors[ci],
                   label=f"{label}: {mape_pct(g):.1f} %", zorder=2)
    ax.plot([lo, hi], [lo, hi], color="0.2", lw=1.0, ls="--", label="predicted = measured", zorder=3)
    _log_axes(ax, lo, hi)
    mine, theirs = mape_pct(pts), mape_pct(other)
    versus = "the same" if abs(mine - theirs) < 0.05 else f"{theirs:.1f} %"
    ax.set_title(f"{title}\nMAPE {mine:.1f} % ({compare} stack: {versus})", fontsize=10)
    ax.set(xlabel="measured (ms)", ylabel=f"predicted, {stack} (ms)")
    ax.legend(fontsize=7, loc="upper left", framealpha=0.9, markerscale=1.8, handlelength=1.2)


def _summary(ax, rows: list[tuple[str, float, float]], stack: str, compare: str, colors) -> None:
    """MAPE per panel under both stacks, one row each (the second marker the titles quote)."""
    y = np.arange(len(rows))[::-1]
    ax.plot([r[2] for r in rows], y, "o", ms=7, mfc="none", mew=1.5, color="0.45", ls="none",
            label=f"{compare} stack")
    ax.plot([r[1] for r in rows], y, "o", ms=7, color=colors[0], ls="none", label=f"{stack} (default)")
    for yy, (_, a, b) in zip(y, rows):
        ax.plot([a, b], [yy, yy], color="0.7", lw=1, zorder=0)
    ax.set_yticks(y, [r[0].split(":")[0].split(" (")[0] for r in rows], fontsize=8.5)
    style.plain_log(ax, "x")
    top = max(max(r[1], r[2]) for r in rows)
    ax.set_xlim(min(min(r[1], r[2]) for r in rows) / 1.5, top * 1.6)
    ax.axvline(10, color="0.3", lw=0.8, ls=":")
    ax.set_ylim(-1.6, len(rows) - 0.5)  # a free band under the last row for the legend
    ax.set(xlabel="MAPE (%); dotted: the 10 % goal", ylabel="operator family")
    ax.set_title("MAPE per family, both stacks", fontsize=10)
    ax.legend(fontsize=7.5, loc="lower center", ncol=2, framealpha=0.9, handletextpad=0.3, columnspacing=1.0)


def fig_operator_fidelity(points: pd.DataFrame | None = None, stack: str = DEFAULT_STACK,
                          compare: str = "ideal") -> Figure:
    """One panel per operator family: the model's time under `stack` (y) against Vidur's measured
    median (x) for every point of `points` (default: the committed sample), coloured by GPU or
    network; titles give the MAPE under `stack` and under `compare`; the last panel sets the
    two stacks' MAPE side by side."""
    points = load_sample() if points is None else points
    priced, other = price(points, stack), price(points, compare)
    colors = style.sns.color_palette("colorblind", 6)
    fig, axes = style.new_figure(4, 2, width=3.9, height=4.1)
    flat = [ax for row in axes for ax in row]
    rows = []
    for ax, (title, families) in zip(flat, PANELS):
        sel = priced["family"].isin(families)
        if not sel.any():
            ax.set_visible(False)
            continue
        _panel(ax, priced[sel], other[sel], title, colors, stack, compare)
        rows.append((title, mape_pct(priced[sel]), mape_pct(other[sel])))
    _summary(flat[len(PANELS)], rows, stack, compare, colors)
    return style.finish(fig, f"Operator fidelity: engines.perf ({stack}) vs Vidur's measured operators "
                             f"({len(points):,}-point sample of data/perf/vidur_operator_sample.csv)", fontsize=12)
