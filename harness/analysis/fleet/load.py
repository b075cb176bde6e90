"""The fleet study's saved results: one row per cell and scheduler (`load_fleet`).

A run is drawn when its saved config is at its cell's settings (harness.analysis.settings, the
cell composed with today's presets); the newest such run of each cell, then, from the reference
tree, the cells still missing. Besides the capacity, each row carries what the probe at capacity
measured of the cache (token hit rate, host-tier hits included) and of KV pressure (preemptions),
and whether that probe looks starved (its sessions, not the fleet, were the limit).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from harness.analysis.fleet.cells import NAME, fleet_cells
from harness.analysis.loader import at_capacity, latest_per_cell, load_results, probes_of
from harness.analysis.settings import by_name, judged


@lru_cache(maxsize=1)
def cell_configs() -> dict[str, dict]:
    return by_name(fleet_cells())


def judge(config: dict, cells: dict[str, dict] | None = None) -> str:
    """"" when a run's saved config is at its cell's settings, else why not."""
    name = str(config.get("name"))
    if not re.match(NAME, name):  # every run of a results tree is judged: compose the cells for ours only
        return "not a fleet cell"
    cells = cell_configs() if cells is None else cells
    return judged(config, cells.get(name), "not a fleet cell")


@dataclass(frozen=True)
class FleetResults:
    rows: pd.DataFrame  # one row per (cell, scheduler): workload, router, tier, capacity, hit rate, ...
    left_out: pd.DataFrame = field(default_factory=pd.DataFrame)  # experiment, run, why


def _read(results_dir: Path, cells: dict[str, dict] | None) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    if not results_dir.is_dir():
        return pd.DataFrame(), pd.DataFrame(), pd.DataFrame()
    runs, probes = load_results(results_dir, latest=False, judge=lambda c: judge(c, cells))
    mine = runs["experiment"].astype(str).str.match(NAME).to_numpy(dtype=bool) if not runs.empty else np.ones(0, bool)
    runs = runs[mine]
    off = runs[runs["settings"] != ""]
    runs, probes = latest_per_cell(runs[runs["settings"] == ""], probes)
    return runs, probes, off


def rows_of(runs: pd.DataFrame, probes: pd.DataFrame) -> pd.DataFrame:
    if runs.empty:
        return pd.DataFrame(columns=["workload", "router", "tier", "policy", "capacity_qps", "hit_rate", "preemptions"])
    parts = runs["experiment"].astype(str).str.extract(NAME)
    # the cell's name says its router as the run's config does: the name's parts replace the columns
    rows = pd.concat([runs.drop(columns=[c for c in parts.columns if c in runs]).reset_index(drop=True),
                      parts.reset_index(drop=True)], axis=1)
    rows = rows[rows["mode"] == "capacity"].copy()
    rows["hit_rate"] = [at_capacity(probes, d, s, "cache_token_hit_rate") for d, s in zip(rows["run_dir"], rows["scheduler"])]
    rows["preemptions"] = [at_capacity(probes, d, s, "num_preemptions") for d, s in zip(rows["run_dir"], rows["scheduler"])]
    return rows.reset_index(drop=True)


def load_fleet(results_dir: str | Path, reference_dir: str | Path | None = None,
               cells: dict[str, dict] | None = None) -> FleetResults:
    """The study's rows from `results_dir`, cells missing there from `reference_dir`."""
    runs, probes, off = _read(Path(results_dir), cells)
    ref = Path(reference_dir) if reference_dir else None
    if ref is not None and ref.is_dir() and ref.resolve() != Path(results_dir).resolve():
        fill, fill_probes, _ = _read(ref, cells)
        if not fill.empty:
            fill = fill[~fill["experiment"].isin(set(runs["experiment"]) if not runs.empty else set())]
            runs = pd.concat([runs, fill], ignore_index=True) if not runs.empty else fill
            probes = pd.concat([probes, probes_of(fill, fill_probes)], ignore_index=True) if not probes.empty else probes_of(fill, fill_probes)
    left = off.drop_duplicates("run_dir")[["experiment", "run", "settings"]] if not off.empty else pd.DataFrame()
    return FleetResults(rows_of(runs, probes), left)
