"""The prefill/decode study's part of figures/REPORT.md: capacity per layout (fig17's table) and
DistServe's published cell against ours."""
from __future__ import annotations

from harness.analysis.figures import Inputs
from harness.analysis.pd.figs import distserve_check, distserve_markdown, pd_markdown, pd_table
from harness.analysis.study import Part, Source


def parts(inputs: Inputs, outcomes: tuple, source: Source) -> tuple[Part, ...]:
    if inputs.clusters.empty:
        return ()
    return (Part(("## Beyond the paper: one pool or prefill and decode apart", "",
                  "Capacity (QPS) of each deployment's four instances' GPUs, colocated or split (fig17). "
                  "A criterion the colocated schedulers and the splits are both judged by; the winner per row.", "",
                  pd_markdown(pd_table(inputs.clusters)), "",
                  "### A published disaggregation result: DistServe (OSDI'24) Fig. 8, chatbot, OPT-13B", "",
                  "Their settings (data/paper/distserve_osdi24.yaml): one 8x A100-SXM node, TTFT 0.25 s and TPOT "
                  "0.1 s per request, 90 % attainment, rates per GPU; openchat_sharegpt4 lengths cut at 2,047 tokens "
                  "stand in for their ShareGPT-v3 prompts.", "",
                  distserve_markdown(distserve_check(inputs.runs, inputs.clusters)), ""), "clusters"),)
