"""The pipeline study's bubbles a request as a distribution (Sarathi 2023, Sec. 5.4: the median is 6.29x
lower with Sarathi): the percentiles each offline run saves (harness/throughput.py BUBBLE_QUANTILES)
of the TP8-PP8 cells, with the engine's CPU costs and with GPU kernels only."""
from __future__ import annotations

from matplotlib.figure import Figure

from harness.analysis import style
from harness.analysis.sarathi23 import matrix
from harness.analysis.sarathi23.figures import Study
from harness.analysis.study import MissingResults

SCHEDULERS = (("orca_best", "Orca-style"), ("decode_maximal", "Sarathi"))


def fig_bubbles(s: Study) -> Figure:
    claim = s.claim("pipeline_bubble_ratio")
    fig, axes = style.new_figure(len(matrix.CPU_COSTS), width=4.6)
    for ax, (choice, suffix) in zip(axes[0], matrix.CPU_COSTS.items()):
        rows = s.rows(matrix.PIPELINE + suffix, exact=True)
        medians = {}
        for k, (name, label) in enumerate(SCHEDULERS):
            hit = rows[rows["scheduler"] == name]
            q = hit["bubble_quantiles_s"].iloc[-1] if not hit.empty else {}
            if not q:
                raise MissingResults(f"no bubble percentiles in the {matrix.PIPELINE + suffix} run of {name} "
                                     "(runs saved before they were: python -m harness figure=all re-runs them)")
            color = style.scheduler_color(name)
            ax.vlines(k, q["p10"], q["p90"], color=color, lw=1.5)
            ax.bar(k, q["p75"] - q["p25"], 0.5, bottom=q["p25"], color=color, alpha=0.6, label=label)
            ax.hlines(q["p50"], k - 0.25, k + 0.25, color="black", lw=2)
            ax.scatter([k], [q["p99"]], marker="^", color=color, zorder=3)
            medians[name] = q["p50"]
        ratio = medians["orca_best"] / medians["decode_maximal"]
        ax.set_yscale("log")
        ax.set_xticks(range(len(SCHEDULERS)), [label for _, label in SCHEDULERS])
        ax.set_ylabel("pipeline-bubble time a request (s)")
        ax.set_title(f"perf.cpu_costs={choice}\nmedians {ratio:.2f}x apart (paper {claim.value:g}x)", fontsize=10)
    axes[0][0].legend(fontsize=8, title="box p25-p75, line p10-p90,\nblack bar median, ▲ p99", title_fontsize=7)
    return fig
