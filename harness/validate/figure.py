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
    for ax, metric in zip(axes[:3], ("ttft", "tpot", "e2e")):
        for label, recs, style in (("real", real, "-"), ("sim", sim, "--")):
            x = np.sort(samples(recs, metric))
            ax.plot(x * 1e3, np.arange(1, len(x) + 1) / max(1, len(x)), style, label=label)
        ax.set(xlabel=f"{metric.upper()} (ms)", ylabel="CDF")
        ax.legend()
    end = max(r.finished_s for r in real)
    bin_s = max(0.5, end / 60)
    for label, recs, style in (("real", real, "-"), ("sim", sim, "--")):
        t, tput, queue = over_time(recs, bin_s)
        axes[3].plot(t, tput, style, label=label)
        axes[4].plot(t, queue, style, label=label)
    axes[3].set(xlabel="time (s)", ylabel="output tokens/s")
    axes[4].set(xlabel="time (s)", ylabel="requests waiting for a first token")
    for ax in axes[3:]:
        ax.legend()
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
