"""The fleet study (issue 39 part 5): chat and agent sessions on 8 replicas behind load-only,
session-affinity and prefix-aware routing, with and without a host KV tier, Sarathi-Serve against
vLLM-style scheduling; capacity under the paper's criterion and GPU-hours for a diurnal day.

Its cells (`cells.fleet_cells`), its own runs read back (`load.load_fleet`: they are clusters of 8
named fleet_*, which the shared capacity loader leaves to it by `runs`), its figures (`figures`),
its table (`table`), its section of figures/REPORT.md (`report`); `day` turns a capacity into
GPU-hours.
"""
from __future__ import annotations

from harness.analysis.fleet.cells import NAME
from harness.analysis.study import FigureSpec, Study, lazy

FIGURES: tuple[FigureSpec, ...] = (
    FigureSpec("fig19_fleet_capacity", "A fleet of 8 replicas: routing, a host KV tier and chunked prefill (beyond the paper)",
               lazy("harness.analysis.fleet.figures:fig_capacity"),
               "Capacity of 8 Qwen3-32B replicas (one H100 each) under the paper's criterion, per router: load only "
               "(least outstanding), session affinity and prefix-aware, for Sarathi-Serve and vLLM, without a host KV "
               "tier (solid) and with one (hatched); the dotted line is the same fleet with prefix caching off (load "
               "only), where no router has a cache to win. Above each bar: the share of prompt tokens found cached at "
               "that capacity. A bar marked ! looks starved (its probe's sessions, not the fleet, were the limit)."),
    FigureSpec("fig20_fleet_gpu_hours", "GPU-hours for a diurnal day at each configuration's capacity (beyond the paper)",
               lazy("harness.analysis.fleet.figures:fig_gpu_hours"),
               "Each hour of the day (rate x (1 + 0.5 cos), peak 14:00) holds ceil(its highest rate / (fleet capacity / "
               "8)) replicas; the peak is today's fleet's capacity (load only, Sarathi-Serve, no tier), which therefore "
               "needs its 8 replicas at 14:00. Lower is cheaper."),
)

# Its figures go in its own section (listed=False), at the report's end.
STUDY = Study("fleet", cells=lazy("harness.analysis.fleet.cells:fleet_cells"), load=lazy("harness.analysis.fleet.report:load"),
              figures=FIGURES, parts=lazy("harness.analysis.fleet.report:parts"), listed=False, runs=NAME)
