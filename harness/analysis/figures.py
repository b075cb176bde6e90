"""The capacity runs every capacity study reads (`Inputs`, `load_inputs`), and how a figure is saved.

`build_figure` never raises for missing results: a figure whose inputs are absent is skipped
with the reason (MissingResults), so a partial results tree still yields a report.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from harness.analysis import settings, style
from harness.analysis.loader import CELL_KEY, latest_per_cell, load_results, probes_of
from harness.analysis.paper import PAPER_FILE, Paper, load_paper
from harness.analysis.study import FigureSpec, MissingResults


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
    # The prefix-caching study's runs and their probes (its own figure and table only).
    prefix: pd.DataFrame = field(default_factory=pd.DataFrame)
    prefix_probes: pd.DataFrame = field(default_factory=pd.DataFrame)


# The prefix-caching study's run names (harness/analysis/prefix/matrix.py): the shared loader keeps
# its runs apart from the paper's, as it keeps clusters apart.
PREFIX_RUN = r"^prefix_(?P<preset>.+)_(?P<slo>strict|relaxed)_(?P<workload>conversations|agents)_(?P<cache>cache|nocache)$"


def _cell_keys(runs: pd.DataFrame) -> list[tuple]:
    # NaN (no fixed rate) never equals itself: compared as None.
    keys = runs[list(CELL_KEY)].astype(object)
    return list(keys.where(keys.notna(), None).itertuples(index=False, name=None))


def _shared(runs: pd.DataFrame) -> pd.DataFrame:
    """`runs` less those a study reads with its own `load` (Study.runs: the fleet study's clusters
    would otherwise join the colocated-vs-split study's and the left-out list)."""
    from harness.analysis.study import lazy  # the registry, read at run time (see matrix.paper_matrix)

    own = lazy("harness.analysis.studies:own_runs")()
    return runs[~runs["experiment"].astype(str).str.match(own).to_numpy(dtype=bool)] if own and not runs.empty else runs


def load_inputs(results_dir: str | Path, paper_path: str | Path = PAPER_FILE, reference_dir: str | Path | None = None,
                include_other: bool = False) -> Inputs:
    """The runs the figures draw: the newest run of each cell at the paper's settings (every run
    with `include_other`, marked), then, from `reference_dir`, the cells still missing."""
    runs, probes = load_results(results_dir, latest=False, judge=settings.judge)
    runs = _shared(runs)
    other = runs["settings"] != ""
    left_out = runs.iloc[0:0] if include_other else latest_per_cell(runs[other], probes)[0]
    if not include_other:
        runs = runs[~other]
    runs, probes = latest_per_cell(runs, probes)
    ref = Path(reference_dir) if reference_dir is not None else None
    if ref is not None and ref.is_dir() and ref.resolve() != Path(results_dir).resolve():
        ref_runs, ref_probes = load_results(ref, judge=settings.judge)
        ref_runs = _shared(ref_runs)
        have = set(_cell_keys(runs))
        missing = [k not in have for k in _cell_keys(ref_runs)]
        fill = ref_runs[(ref_runs["settings"] == "").to_numpy() & np.array(missing, dtype=bool)]
        if not fill.empty:
            runs = pd.concat([runs, fill], ignore_index=True)
            probes = pd.concat([probes, probes_of(fill, ref_probes)], ignore_index=True)
    one = ((runs["instances"] == 1) & (runs["layout"] == "")).to_numpy(dtype=bool) if not runs.empty else np.ones(0, bool)
    clusters, runs = runs[~one].reset_index(drop=True), runs[one].reset_index(drop=True)
    study = runs["experiment"].astype(str).str.match(PREFIX_RUN).to_numpy(dtype=bool) if not runs.empty else np.ones(0, bool)
    prefix, runs = runs[study].reset_index(drop=True), runs[~study].reset_index(drop=True)
    return Inputs(Path(results_dir), runs, probes_of(runs, probes), load_paper(paper_path), left_out, ref, clusters,
                  prefix, probes_of(prefix, probes))


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
    return FigureOutcome(spec.name, spec.title, style.save(fig, Path(figures_dir) / f"{spec.name}.png"), None, spec.caption)

