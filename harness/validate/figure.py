"""The validation figure: CDFs of TTFT, TPOT and E2E side by side (real vs sim), and output
throughput and queue length (requests waiting for their first token) over time."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from harness.records import RequestRecord

from .compare import over_time, samples


def write_figure(path: Path, real: Sequence[RequestRecord], sim: Sequence[RequestRecord], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 5, figsize=(22, 4))
    cdfs = ("ttft", "tpot", "e2e")
    bin_s = max(0.5, max(r.finished_s for r in real) / 60)
    for label, recs, style in (("real", real, "-"), ("sim", sim, "--")):
        for ax, metric in zip(axes, cdfs):
            x = np.sort(samples(recs, metric))
            ax.plot(x * 1e3, np.arange(1, len(x) + 1) / max(1, len(x)), style, label=label)
        t, tput, queue = over_time(recs, bin_s)
        axes[3].plot(t, tput, style, label=label)
        axes[4].plot(t, queue, style, label=label)
    labels = [(f"{m.upper()} (ms)", "CDF") for m in cdfs] + [("time (s)", "output tokens/s"),
                                                             ("time (s)", "requests waiting for a first token")]
    for ax, (xlabel, ylabel) in zip(axes, labels):
        ax.set(xlabel=xlabel, ylabel=ylabel)
        ax.legend()
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
