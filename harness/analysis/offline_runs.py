"""Offline throughput runs read back (harness/commands/offline.py writes them): one row per run and
scheduler, oldest run first. The capacity readers (loader.py) pass these runs by; the nightly drift
check (drift.py) and the first Sarathi paper's report (sarathi23/) read them here."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import yaml

from harness.analysis.loader import deployment_fields, find_runs, nan_if_none

METRICS = ("completed", "makespan_s", "token_throughput", "output_token_throughput", "request_throughput",
           "iterations", "prefill_only", "decode_only", "hybrid", "hybrid_time_share", "decodes_per_hybrid",
           "piggybacked_share", "marginal_decode_s", "decode_alone_s", "decode_speedup", "bubble_p50_s", "bubble_mean_s")
COLUMNS = ("experiment", "run", "run_dir", "git_commit", "backend", "model", "gpu", "tp", "pp", "parallel", "instances",
           "dataset", "sequence_length", "pd_ratio", "scheduler", "policy", "batch", "chunk_size", "tile_tokens", "baseline",
           "gain", *METRICS, "bubble_share", "bubble_quantiles_s", "results_from", "config")


def load_offline(results_dir: str | Path) -> pd.DataFrame:
    """Every finished offline run under results_dir: one row per (run, scheduler), oldest run first
    (`config`: the run's saved config; `gain`: over its baseline, NaN without one)."""
    rows = []
    for r in find_runs(results_dir):
        summary = json.loads((r.path / "summary.json").read_text())
        if summary.get("mode") != "offline":
            continue
        config = yaml.safe_load((r.path / "config.yaml").read_text()) or {}
        synthetic = (config.get("dataset") or {}).get("synthetic") or {}
        for name, s in summary.get("offline", {}).items():
            knobs = s.get("config") or {}
            rows.append({
                "experiment": summary.get("experiment", r.experiment), "run": r.run, "run_dir": str(r.path),
                "git_commit": summary.get("git_commit"), "backend": summary.get("backend"), **deployment_fields(config),
                "sequence_length": synthetic.get("sequence_length"), "pd_ratio": synthetic.get("pd_ratio"),
                "scheduler": name, "policy": knobs.get("policy", name), "batch": knobs.get("max_num_seqs"),
                "chunk_size": knobs.get("chunk_size"), "tile_tokens": knobs.get("tile_tokens"),
                "baseline": summary.get("baseline"), "gain": nan_if_none((summary.get("gains") or {}).get(name)),
                **{m: nan_if_none(s.get(m)) for m in METRICS}, "bubble_share": s.get("bubble_share") or {},
                "bubble_quantiles_s": s.get("bubble_quantiles_s") or {},
                "results_from": str(r.path.parent.parent), "config": config})
    return pd.DataFrame(rows, columns=list(COLUMNS))
