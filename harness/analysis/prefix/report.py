"""The prefix-caching study's part of figures/REPORT.md: capacity per workload, SLO and cache
(fig18's table) and the answer it gives."""
from __future__ import annotations

from harness.analysis.figures import Inputs
from harness.analysis.prefix.figs import prefix_answer, prefix_markdown, prefix_table
from harness.analysis.study import Part, Source


def parts(inputs: Inputs, outcomes: tuple, source: Source) -> tuple[Part, ...]:
    if inputs.prefix.empty:
        return ()
    table = prefix_table(inputs.prefix, inputs.prefix_probes)
    return (Part(("## Beyond the paper: conversations, agents and prefix caching", "",
                  "Capacity (QPS) under the paper's criterion, per workload, SLO and prefix cache (fig18): "
                  "Sarathi-Serve at each token budget, vLLM and Orca, Sarathi-Serve's best over each, and the share "
                  "of prompt tokens the cache held at Sarathi-Serve's capacity.", "",
                  prefix_markdown(table), "", prefix_answer(table), ""), "workloads"),)
