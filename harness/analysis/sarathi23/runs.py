"""Offline runs read back (harness/commands/offline.py writes them): one row per run and scheduler.

`load_offline(results_dir)`: every finished offline run, oldest first. `study_runs(...)`: the runs
the Sarathi (2023) figures and table draw: per cell of the matrix (sarathi23/matrix.py), the newest
run at the cell's settings (its saved config against the cell's composed one, as the Sarathi-Serve
report judges its cells), then, from the reference tree, the cells still missing; runs not at the
settings are listed with why (`left_out`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import pandas as pd
import yaml

from harness.analysis.loader import find_runs
from harness.analysis.settings import differences

METRICS = ("completed", "makespan_s", "token_throughput", "output_token_throughput", "request_throughput",
           "iterations", "prefill_only", "decode_only", "hybrid", "hybrid_time_share", "decodes_per_hybrid",
           "piggybacked_share", "marginal_decode_s", "decode_alone_s", "decode_speedup", "bubble_p50_s", "bubble_mean_s")
COLUMNS = ("experiment", "run", "run_dir", "git_commit", "backend", "model", "gpu", "tp", "pp", "instances",
           "sequence_length", "pd_ratio", "scheduler", "policy", "batch", "chunk_size", "tile_tokens", "baseline",
           "gain", *METRICS, "bubble_share", "results_from", "config")


def _float(v):
    return float("nan") if v is None else v


def load_offline(results_dir: str | Path) -> pd.DataFrame:
    """Every finished offline run under results_dir: one row per (run, scheduler), oldest run first."""
    rows = []
    for r in find_runs(results_dir):
        summary = json.loads((r.path / "summary.json").read_text())
        if summary.get("mode") != "offline":
            continue
        config = yaml.safe_load((r.path / "config.yaml").read_text()) or {}
        synthetic = (config.get("dataset") or {}).get("synthetic") or {}
        par = config.get("parallel") or {}
        for name, s in summary.get("offline", {}).items():
            knobs = s.get("config") or {}
            rows.append({
                "experiment": summary.get("experiment", r.experiment), "run": r.run, "run_dir": str(r.path),
                "git_commit": summary.get("git_commit"), "backend": summary.get("backend"),
                "model": (config.get("model") or {}).get("name"), "gpu": (config.get("hardware") or {}).get("gpu"),
                "tp": int(par.get("tp", 1)), "pp": int(par.get("pp", 1)),
                "instances": int((config.get("cluster") or {}).get("instances", 1)),
                "sequence_length": synthetic.get("sequence_length"), "pd_ratio": synthetic.get("pd_ratio"),
                "scheduler": name, "policy": knobs.get("policy", name), "batch": knobs.get("max_num_seqs"),
                "chunk_size": knobs.get("chunk_size"), "tile_tokens": knobs.get("tile_tokens"),
                "baseline": summary.get("baseline"), "gain": _float((summary.get("gains") or {}).get(name)),
                **{m: _float(s.get(m)) for m in METRICS}, "bubble_share": s.get("bubble_share") or {},
                "results_from": str(r.path.parent.parent), "config": config})
    return pd.DataFrame(rows, columns=list(COLUMNS))


@lru_cache(maxsize=1)
def cell_configs() -> dict[str, dict]:
    """Cell name -> its composed config (today's presets)."""
    from omegaconf import OmegaConf

    from harness.analysis.sarathi23.matrix import sarathi23_cells
    from harness.config import compose

    return {c.name: OmegaConf.to_container(compose(list(c.overrides)), resolve=True) for c in sarathi23_cells()}


def judge(config: dict, cells: dict[str, dict] | None = None) -> str:
    """"" when a run's saved config is at its cell's settings, else why not."""
    cells = cell_configs() if cells is None else cells
    cell = cells.get(str(config.get("name")))
    if cell is None:
        return "not a Sarathi (2023) cell"
    return "; ".join(differences(config, cell))


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
