"""The results store: one directory per run, written atomically.

results/<experiment>/<timestamp>/
  config.yaml          the fully resolved config
  summary.json         capacities, every probe's verdict and metrics, provenance (git, versions, seed)
  requests.parquet     one row per request per probe (scalar per-request metrics)
  token_times.parquet  token times of every request of each scheduler's capacity probe

Files go to a hidden `.<timestamp>.partial` directory that is renamed when complete, so a
crashed or interrupted run never looks like a finished one.
"""
from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

import numpy as np
import pandas as pd

from harness.records import RequestRecord

PACKAGES = ("numpy", "pandas", "pyarrow", "hydra-core", "sarathi-harness")


def provenance() -> dict:
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, cwd=Path(__file__).parent
        ).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    versions = {}
    for p in PACKAGES:
        try:
            versions[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            versions[p] = None
    return {"git_commit": commit, "versions": versions, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def records_frame(records: Sequence[RequestRecord], **columns) -> pd.DataFrame:
    """Scalar per-request columns (token times summarized), plus constant `columns` (scheduler, qps)."""
    tbt_max = [float(np.max(np.diff(r.token_times_s))) if len(r.token_times_s) > 1 else np.nan for r in records]
    df = pd.DataFrame(
        {
            "request_id": [r.request_id for r in records],
            "arrival_s": [r.arrival_s for r in records],
            "prompt_len": [r.prompt_len for r in records],
            "output_len": [r.output_len for r in records],
            "dispatched_s": [r.dispatched_s for r in records],
            "first_scheduled_s": [r.first_scheduled_s for r in records],
            "first_token_s": [r.first_token_s for r in records],
            "finished_s": [r.finished_s for r in records],
            "num_tokens": [len(r.token_times_s) for r in records],
            "tbt_max_s": tbt_max,
            "num_preemptions": [r.num_preemptions for r in records],
            "error": [r.error for r in records],
        }
    )
    for i, (k, v) in enumerate(columns.items()):
        df.insert(i, k, v)
    return df


def token_frame(records: Sequence[RequestRecord], **columns) -> pd.DataFrame:
    df = pd.DataFrame(
        {"request_id": [r.request_id for r in records], "token_times_s": [r.token_times_s.tolist() for r in records]}
    )
    for i, (k, v) in enumerate(columns.items()):
        df.insert(i, k, v)
    return df


class RunWriter:
    def __init__(self, results_dir: str | Path, experiment: str) -> None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        base = Path(results_dir) / experiment
        final = base / stamp
        n = 1
        while final.exists():  # two runs in the same second
            final = base / f"{stamp}-{n}"
            n += 1
        self.final = final
        self.partial = base / f".{final.name}.partial"

    def write(self, config_yaml: str, summary: dict, requests: pd.DataFrame, tokens: pd.DataFrame) -> Path:
        self.partial.mkdir(parents=True, exist_ok=False)
        (self.partial / "config.yaml").write_text(config_yaml)
        (self.partial / "summary.json").write_text(json.dumps(summary, indent=2, default=_json_default) + "\n")
        requests.to_parquet(self.partial / "requests.parquet", index=False)
        tokens.to_parquet(self.partial / "token_times.parquet", index=False)
        os.rename(self.partial, self.final)
        return self.final


def _json_default(o):
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serializable: {type(o).__name__}")
