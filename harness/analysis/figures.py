"""Every figure, built from one results directory: the registry and the loop that saves them.

`build_figures` never raises for missing results: a figure whose inputs are absent is skipped
with the reason (MissingResults), so a partial results tree still yields a report.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from harness.analysis import style
from harness.analysis.capacity_figs import MissingResults, fig_capacity, fig_capacity_vs_slo, fig_pipeline
from harness.analysis.latency_figs import fig_stall
from harness.analysis.loader import load_results
from harness.analysis.paper import PAPER_FILE, Paper, load_paper


@dataclass(frozen=True)
class Inputs:
    """What every figure and table reads: the loaded results and the published numbers."""
    results_dir: Path
    runs: pd.DataFrame
    probes: pd.DataFrame
    paper: Paper


def load_inputs(results_dir: str | Path, paper_path: str | Path = PAPER_FILE) -> Inputs:
    runs, probes = load_results(results_dir)
    return Inputs(Path(results_dir), runs, probes, load_paper(paper_path))


@dataclass(frozen=True)
class FigureSpec:
    name: str  # file stem under figures/
    title: str
    build: Callable[[Inputs], Figure]
    caption: str = ""  # what to read off the figure, printed under it in the report


FIGURES: tuple[FigureSpec, ...] = (
    FigureSpec("fig01_generation_stall", "Generation stalls: one request's tokens, and P99 TBT vs load (Fig. 1 analog)",
               lambda i: fig_stall(i.runs, i.probes),
               "Left: the request with the longest gap between two of its tokens under vLLM (shaded), and the same "
               "request under Sarathi-Serve (same load when a fixed-rate run exists). Right: P99 TBT of every probe "
               "of the capacity searches against the SLO (dashed): where a line crosses it is that scheduler's "
               "TBT-limited capacity."),
    FigureSpec("fig10_11_capacity", "Capacity per deployment, dataset, SLO and scheduler (Fig. 10–11 analog)",
               lambda i: fig_capacity(i.runs, i.paper),
               "Highest Poisson rate meeting P99 TBT ≤ SLO and median scheduling delay ≤ 2 s. Above each group: "
               "Sarathi-Serve's reproduced capacity ratio over each baseline, with the paper's where it publishes one."),
    FigureSpec("fig12_capacity_vs_slo", "Capacity vs P99 TBT SLO (Fig. 12 analog)",
               lambda i: fig_capacity_vs_slo(i.runs, i.paper),
               "How capacity grows as the TBT SLO loosens (strict → relaxed), per deployment with two or more SLOs."),
    FigureSpec("fig13_pipeline_parallel", "Falcon-180B: TP-8 vs TP4-PP2 (Fig. 13 analog)",
               lambda i: fig_pipeline(i.runs, i.probes, i.paper),
               "Left: capacity of each scheduler × parallelism (dotted bars: tensor parallel only), with the paper's "
               "cross-deployment ratios below. Right: median TBT against load for each."),
)


@dataclass(frozen=True)
class FigureOutcome:
    name: str
    title: str
    path: Path | None  # None when skipped
    skipped: str | None = None  # why, when skipped
    caption: str = ""


def build_figure(spec: FigureSpec, inputs: Inputs, figures_dir: str | Path) -> FigureOutcome:
    try:
        fig = spec.build(inputs)
    except MissingResults as e:
        return FigureOutcome(spec.name, spec.title, None, str(e), spec.caption)
    try:
        path = style.save(fig, Path(figures_dir) / f"{spec.name}.png")
    finally:
        style.close(fig)
    return FigureOutcome(spec.name, spec.title, path, None, spec.caption)


def build_figures(inputs: Inputs, figures_dir: str | Path, only: tuple[str, ...] | None = None) -> tuple[FigureOutcome, ...]:
    """Save every figure (or those named in `only`) as figures_dir/<name>.png."""
    specs = [s for s in FIGURES if only is None or s.name in only]
    return tuple(build_figure(s, inputs, figures_dir) for s in specs)
