"""Every figure, built from one results directory: the registry and the loop that saves them.

`build_figures` never raises for missing results: a figure whose inputs are absent is skipped
with the reason (MissingResults), so a partial results tree still yields a report.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from harness.analysis import settings, style
from harness.analysis.capacity_figs import MissingResults, fig_capacity, fig_capacity_vs_slo, fig_pipeline
from harness.analysis.latency_figs import fig_stall
from harness.analysis.loader import CELL_KEY, latest_per_cell, load_results, probes_of
from harness.analysis.paper import PAPER_FILE, Paper, load_paper
from harness.analysis.pd_figs import fig_pd


@dataclass(frozen=True)
class Inputs:
    """What every figure and table reads: the runs drawn, their probes and the published numbers.

    `runs` carries `settings` ("" at the paper's settings, else why not) and `results_from` (the
    results directory, or the reference one where it filled a cell). `left_out`: runs read but not
    drawn (not at the paper's settings), with why, so the report can list them.
    """
    results_dir: Path
    runs: pd.DataFrame
    probes: pd.DataFrame
    paper: Paper
    left_out: pd.DataFrame = field(default_factory=pd.DataFrame)
    reference_dir: Path | None = None
    # Runs of clusters (replicas or prefill/decode layouts): the paper's figures are of one engine,
    # so these are kept apart and only the cluster study's figure and table read them.
    clusters: pd.DataFrame = field(default_factory=pd.DataFrame)


def _cell_keys(runs: pd.DataFrame) -> list[tuple]:
    # NaN (no fixed rate) never equals itself: compared as None.
    keys = runs[list(CELL_KEY)].astype(object)
    return list(keys.where(keys.notna(), None).itertuples(index=False, name=None))


def load_inputs(results_dir: str | Path, paper_path: str | Path = PAPER_FILE, reference_dir: str | Path | None = None,
                include_other: bool = False) -> Inputs:
    """The runs the figures draw: the newest run of each cell at the paper's settings (every run
    with `include_other`, marked), then, from `reference_dir`, the cells still missing."""
    runs, probes = load_results(results_dir, latest=False, judge=settings.judge)
    other = runs["settings"] != ""
    left_out = runs.iloc[0:0] if include_other else latest_per_cell(runs[other], probes)[0]
    if not include_other:
        runs = runs[~other]
    runs, probes = latest_per_cell(runs, probes)
    ref = Path(reference_dir) if reference_dir is not None else None
    if ref is not None and ref.is_dir() and ref.resolve() != Path(results_dir).resolve():
        ref_runs, ref_probes = load_results(ref, judge=settings.judge)
        have = set(_cell_keys(runs))
        missing = [k not in have for k in _cell_keys(ref_runs)]
        fill = ref_runs[(ref_runs["settings"] == "").to_numpy() & np.array(missing, dtype=bool)]
        if not fill.empty:
            runs = pd.concat([runs, fill], ignore_index=True)
            probes = pd.concat([probes, probes_of(fill, ref_probes)], ignore_index=True)
    one = ((runs["instances"] == 1) & (runs["layout"] == "")).to_numpy(dtype=bool) if not runs.empty else np.ones(0, bool)
    clusters, runs = runs[~one].reset_index(drop=True), runs[one].reset_index(drop=True)
    return Inputs(Path(results_dir), runs, probes_of(runs, probes), load_paper(paper_path), left_out, ref, clusters)


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
               lambda i: fig_pipeline(i.runs, i.probes, i.paper),
               "Left: capacity of each scheduler × parallelism (dotted bars: tensor parallel only), with the paper's "
               "cross-deployment ratios below. Right: median TBT against load for each."),
    FigureSpec("fig17_prefill_decode", "Colocated chunked prefills vs disaggregated prefill/decode, at equal GPUs (beyond the paper)",
               lambda i: fig_pd(i.clusters),
               "Each deployment's GPUs as four colocated replicas (Sarathi-Serve, vLLM; least-outstanding routing) or "
               "split into prefill and decode instances (P:D; vLLM's whole-prompt prefills, KV moved after each "
               "prefill over the node's links), 1,024 requests per probe; one row per deployment. Left: "
               "the paper's criterion, under which the splits with one decode instance come out best; it cannot see "
               "a request's one long wait for a decode slot (one gap per request is under 1 % of the pooled TBT "
               "samples). Middle and right: DistServe's criterion (90 % of requests within a TTFT SLO, a multiple of "
               "one unloaded 2,048-token prefill, and a per-request TPOT SLO, the deployment's strict TBT SLO), "
               "which does: there a colocated layout wins, vLLM's prefill-first one when TTFT is tight and "
               "Sarathi-Serve's when it is loose, and the best split stays below the winner, because a decode instance's "
               "KV pool holds few requests' contexts while the prefill instances' memory goes unused for them. "
               "The best value in each panel is bold."),
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
