"""One look for every figure: names, colours, sizes, and the save call.

Matplotlib runs on the Agg backend (files only, no display): figures are built on CI machines
and in nightly jobs without a screen.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot is imported anywhere in this process
import matplotlib.pyplot as plt  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

SCHEDULER_LABELS = {
    "sarathi": "Sarathi-Serve",
    "vllm": "vLLM",
    "orca": "Orca",
    "fastertransformer": "FasterTransformer",
    "hybrid_only": "hybrid-batching only",
    "chunked_only": "chunked-prefills only",
    # the first Sarathi paper's (arXiv 2308.16369)
    "decode_maximal": "Sarathi (decode-maximal)",
    "orca_best": "Orca, best case",
    "orca_worst": "baseline (Orca worst case)",
}
SCHEDULER_ORDER = tuple(SCHEDULER_LABELS)
_PALETTE = sns.color_palette("colorblind", len(SCHEDULER_ORDER))
SCHEDULER_COLORS = dict(zip(SCHEDULER_ORDER, _PALETTE))

MODEL_LABELS = {"mistral-7b": "Mistral-7B", "yi-34b": "Yi-34B", "llama2-70b": "LLaMA2-70B", "falcon-180b": "Falcon-180B",
                "llama-13b": "LLaMA-13B", "llama-33b": "LLaMA-33B", "gpt3-175b": "GPT-3 175B"}
DATASET_LABELS = {"openchat_sharegpt4": "sharegpt4", "arxiv_summarization": "arxiv-summ."}
GPU_LABELS = {"a100-80g": "A100-80G", "a100-80g-pcie": "A100-80G PCIe", "a100-80g-sxm": "A100-80G SXM", "a40": "A40", "h100": "H100", "h200": "H200",
              "rtx-a6000": "RTX A6000"}

# Width fits a README column at 100 % zoom when saved at DPI (≈ 1800 px wide).
DPI = 150
PANEL_W, PANEL_H = 4.2, 3.6


def scheduler_label(name: str) -> str:
    return SCHEDULER_LABELS.get(name, name)


def scheduler_color(name: str):
    return SCHEDULER_COLORS.get(name, (0.4, 0.4, 0.4))


def parallel_label(parallel: str) -> str:
    """tp4pp2 -> TP4-PP2, tp8 -> TP-8 (the paper's spelling)."""
    if "pp" in parallel:
        tp, pp = parallel.removeprefix("tp").split("pp")
        return f"TP{tp}-PP{pp}"
    return f"TP-{parallel.removeprefix('tp')}"


def deployment_label(model: str, parallel: str, gpu: str, num_gpus: int) -> str:
    return f"{MODEL_LABELS.get(model, model)} {parallel_label(parallel)} · {num_gpus}× {GPU_LABELS.get(gpu, gpu)}"


def dataset_label(name: str) -> str:
    return DATASET_LABELS.get(name, name)


def new_figure(ncols: int, nrows: int = 1, width: float = PANEL_W, height: float = PANEL_H, **kw):
    sns.set_theme(style="whitegrid", context="notebook", font_scale=1.0)
    plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": DPI, "axes.titlesize": 11, "axes.labelsize": 10})
    return plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False, **kw)


def save(fig: Figure, path: str | Path) -> Path:
    """Save `fig` at `path` and close it, saved or not (pyplot keeps every open figure)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, bbox_inches="tight")
    finally:
        plt.close(fig)
    return path


def finish(fig: Figure, title: str | None = None, rect=None, **suptitle) -> Figure:
    """Every figure's last step: its title over the panels (`suptitle`'s keywords), a tight layout
    within `rect`."""
    if title is not None:
        fig.suptitle(title, **suptitle)
    fig.tight_layout(rect=rect)
    return fig


def close(fig: Figure) -> None:
    plt.close(fig)


def panels(n: int, max_cols: int = 2, width: float = PANEL_W, height: float = PANEL_H):
    """A figure with n panels in a grid at most max_cols wide (so it stays legible in a README);
    unused cells are hidden. Returns (fig, flat list of n axes)."""
    cols = min(n, max_cols)
    fig, axes = new_figure(cols, -(-n // cols), width=width, height=height)
    flat = [ax for row in axes for ax in row]
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def plain_log(ax, axis: str = "x") -> None:
    """Log scale with plain numbers (0.25, 1, 4) instead of 2×10⁻¹ minor labels that collide."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    a = ax.xaxis if axis == "x" else ax.yaxis
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
    a.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    a.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    a.set_minor_formatter(NullFormatter())
