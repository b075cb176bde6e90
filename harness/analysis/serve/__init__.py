"""The Sarathi-Serve (OSDI'24) reproduction: its matrix (`matrix`), capacity and latency figures
(`capacity_figs`, `latency_figs`), the paper's ratios against ours (`compare`, `headline`), what
its matrix costs live (`cost`) and its parts of figures/REPORT.md (`report`)."""
from __future__ import annotations

from harness.analysis.study import FigureSpec, Study, lazy

FIGURES: tuple[FigureSpec, ...] = (
    FigureSpec("fig01_generation_stall", "Generation stalls: one request's tokens, and P99 TBT vs load (Fig. 1 analog)",
               lambda i: lazy("harness.analysis.serve.latency_figs:fig_stall")(i.runs, i.probes),
               "Left: the request with the longest gap between two of its tokens under vLLM (shaded), and the same "
               "request under Sarathi-Serve (same load when a fixed-rate run exists). Right: P99 TBT of every probe "
               "of the capacity searches against the SLO (dashed): where a line crosses it is that scheduler's "
               "TBT-limited capacity."),
    FigureSpec("fig10_11_capacity", "Capacity per deployment, dataset, SLO and scheduler (Fig. 10–11 analog)",
               lambda i: lazy("harness.analysis.serve.capacity_figs:fig_capacity")(i.runs, i.paper),
               "Highest Poisson rate meeting P99 TBT ≤ SLO and median scheduling delay ≤ 2 s. Above each group: "
               "Sarathi-Serve's reproduced capacity ratio over each baseline, with the paper's where it publishes one."),
    FigureSpec("fig12_capacity_vs_slo", "Capacity vs P99 TBT SLO (Fig. 12 analog)",
               lambda i: lazy("harness.analysis.serve.capacity_figs:fig_capacity_vs_slo")(i.runs, i.paper),
               "How capacity changes as the TBT SLO loosens (strict → relaxed), per deployment with two or more SLOs. "
               "Falcon-180B on TP-8 (dotted) is run for vLLM only, as in the paper, where it is Fig. 13's baseline. "
               "On the two pipeline-parallel deployments Sarathi-Serve's capacity *falls* when the SLO is relaxed: "
               "there both capacities are limited by the median scheduling delay (throughput), not by TBT, and the "
               "paper's relaxed setting uses a larger token budget (2,048 for Falcon-180B, 1,536 for LLaMA2-70B, "
               "against 512). On two stages, larger micro-batches are less even and a request in flight cannot be "
               "scheduled again, so the stages idle more. Measured in simulation (512 requests per probe): Falcon-180B "
               "TP4-PP2 at the relaxed SLO reaches 1.03 QPS with budget 512 and 0.86 QPS with 2,048; on TP-8 (no "
               "pipeline) the same change raises it from 0.38 to 0.44 QPS "
               "(`python -m harness experiment=falcon180b_tp4pp2_relaxed scheduler=[sarathi] "
               "scheduler.sarathi.token_budget=512 search.num_requests=512`, and with `parallel=tp8`)."),
    FigureSpec("fig13_pipeline_parallel", "Falcon-180B: TP-8 vs TP4-PP2 (Fig. 13 analog)",
               lambda i: lazy("harness.analysis.serve.capacity_figs:fig_pipeline")(i.runs, i.probes, i.paper),
               "Left: capacity of each scheduler × parallelism (dotted bars: tensor parallel only), with the paper's "
               "cross-deployment ratios below. Right: median TBT against load for each."),
)

STUDY = Study("serve", cells=lazy("harness.analysis.serve.matrix:serve_cells"), figures=FIGURES,
              parts=lazy("harness.analysis.serve.report:parts"), draw=lazy("harness.analysis.serve.report:draw"))
