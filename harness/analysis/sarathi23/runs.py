"""The runs the first Sarathi paper's report draws (offline runs: harness/analysis/offline_runs.py).

`study_runs(...)`: the runs the Sarathi (2023) figures and table draw: per cell of the matrix (sarathi23/matrix.py), the newest
run at the cell's settings (its saved config against the cell's composed one, as the Sarathi-Serve
report judges its cells), then, from the reference tree, the cells still missing; runs not at the
settings are listed with why (`left_out`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import pandas as pd

from harness.analysis.offline_runs import load_offline
from harness.analysis.settings import by_name, judged


@lru_cache(maxsize=1)
def cell_configs() -> dict[str, dict]:
    from harness.analysis.sarathi23.matrix import sarathi23_cells

    return by_name(sarathi23_cells())


def judge(config: dict, cells: dict[str, dict] | None = None) -> str:
    """"" when a run's saved config is at its cell's settings, else why not."""
    cells = cell_configs() if cells is None else cells
    return judged(config, cells.get(str(config.get("name"))), "not a Sarathi (2023) cell")


@dataclass(frozen=True)
class StudyRuns:
    runs: pd.DataFrame  # the newest run of each cell at its settings (reference runs fill the gaps)
    left_out: pd.DataFrame = field(default_factory=pd.DataFrame)  # experiment, run, why
    reference_dir: Path | None = None


def study_runs(results_dir: str | Path, reference_dir: str | Path | None = None,
               cells: dict[str, dict] | None = None) -> StudyRuns:
    def at_settings(df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
        if df.empty:
            return df, df
        why = {d: judge(c, cells) for d, c in zip(df["run_dir"], df["config"])}
        df = df.assign(settings=df["run_dir"].map(why))
        return df[df["settings"] == ""], df[df["settings"] != ""]

    own, off = at_settings(load_offline(results_dir))
    own = own.drop_duplicates(["experiment", "scheduler"], keep="last")
    ref = Path(reference_dir) if reference_dir else None
    if ref is not None and ref.is_dir() and ref.resolve() != Path(results_dir).resolve():
        fill, _ = at_settings(load_offline(ref))
        fill = fill.drop_duplicates(["experiment", "scheduler"], keep="last")
        fill = fill[~fill["experiment"].isin(set(own["experiment"]))]
        own = pd.concat([own, fill], ignore_index=True)
    left = off.drop_duplicates("run_dir")[["experiment", "run", "settings"]] if not off.empty else off
    return StudyRuns(own.reset_index(drop=True), left, ref)
