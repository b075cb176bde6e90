"""Shrink a results tree for committing (test fixtures, nightly references) without changing
what the analysis reads from it.

Kept whole: config.yaml, summary.json (every capacity and probe verdict; re-serialized without
indentation). Cut: requests.parquet to the rows of each scheduler's capacity probe (the probe of
a fixed-rate run), token_times.parquet to the few requests with the longest stalls, kept under
every scheduler so the Fig. 1 timeline picks the same request from the trimmed copy. An offline
run (mode offline) keeps its config and summary only: its figures and drift check read nothing else.

    python -m harness.analysis.trim src=SRC dst=DST [keep_requests=4] [request_rows=N] [runs=EXP/RUN,...]
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from harness.analysis.loader import find_runs, load_runs
from harness.analysis.offline_runs import load_offline
from harness.overrides import exits_2, parse as parse_overrides

MIN_TOKENS = 16  # fig01's timeline: a handful of tokens shows no stall worth drawing (serve/latency_figs.py)


def by_stall(tokens: pd.DataFrame) -> pd.DataFrame:
    """Token rows of at least MIN_TOKENS tokens, the longest gap between two of them (`_gap`) first, ties
    by request id: the one order Fig. 1 picks its request in and a trimmed copy keeps requests by."""
    t = tokens[tokens["token_times_s"].map(len) >= MIN_TOKENS]
    gap = t["token_times_s"].map(lambda times: float(np.max(np.diff(np.asarray(times, dtype=float)))))
    return t.assign(_gap=gap).sort_values(["_gap", "request_id"], ascending=[False, True])


def _capacity_probe_rows(requests: pd.DataFrame, summary: dict, rows: int | None) -> pd.DataFrame:
    keep = pd.Series(False, index=requests.index)
    for name, s in (summary.get("schedulers") or {}).items():
        probes = s.get("probes") or []
        qps = probes[0]["qps"] if summary.get("mode") == "fixed_rate" and probes else s.get("capacity_qps")
        keep |= (requests["scheduler"] == name) & (requests["qps"] == qps)
    out = requests[keep]
    return out if rows is None else out.groupby("scheduler", sort=False).head(rows)


def trim_run(src: str | Path, dst: str | Path, keep_requests: int = 4, request_rows: int | None = None) -> Path:
    """Trim one run directory into dst. `request_rows`: at most this many requests.parquet rows per scheduler."""
    src, dst = Path(src), Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src / "config.yaml", dst / "config.yaml")
    summary = json.loads((src / "summary.json").read_text())
    (dst / "summary.json").write_text(json.dumps(summary, separators=(",", ":")) + "\n")
    if summary.get("mode") == "offline":
        return dst
    if (src / "requests.parquet").is_file():
        req = _capacity_probe_rows(pd.read_parquet(src / "requests.parquet"), summary, request_rows)
        req.to_parquet(dst / "requests.parquet", index=False, compression="zstd")
    if (src / "token_times.parquet").is_file():
        tok = pd.read_parquet(src / "token_times.parquet")
        # per scheduler, the keep_requests requests (of at least MIN_TOKENS tokens) with the longest token gap
        stalls = by_stall(tok).groupby("scheduler", sort=False).head(keep_requests) if keep_requests > 0 else tok[:0]
        tok = tok[tok["request_id"].isin(set(stalls["request_id"]))]
        tok.to_parquet(dst / "token_times.parquet", index=False, compression="zstd")
    return dst


def trim_tree(src_root: str | Path, dst_root: str | Path, keep_requests: int = 4, latest: bool = True,
              request_rows: int | None = None, runs: set[str] | None = None) -> list[Path]:
    """Trim every run (only the newest run of each cell when `latest`; only `runs`, as
    "experiment/run" names, when given) into dst_root/<experiment>/<run>/."""
    wanted = None
    if latest:
        offline = load_offline(src_root).drop_duplicates("experiment", keep="last")
        wanted = set(load_runs(src_root)["run_dir"]) | set(offline["run_dir"])
    return [trim_run(r.path, Path(dst_root) / r.experiment / r.run, keep_requests, request_rows) for r in find_runs(src_root)
            if (wanted is None or str(r.path) in wanted) and (runs is None or f"{r.experiment}/{r.run}" in runs)]


@exits_2
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.analysis.trim", description="Trim a results tree for committing.")
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--keep-requests", type=int, default=4, help="token timelines kept per scheduler")
    ap.add_argument("--request-rows", type=int, default=None, help="requests.parquet rows kept per scheduler")
    ap.add_argument("--runs", default=None, help="comma-separated experiment/run names to keep (default: all)")
    ap.add_argument("--all-runs", action="store_true", help="trim superseded runs too")
    a = parse_overrides(ap, sys.argv[1:] if argv is None else argv)
    runs = set(a.runs.split(",")) if a.runs else None
    paths = trim_tree(a.src, a.dst, a.keep_requests, latest=not a.all_runs, request_rows=a.request_rows, runs=runs)
    size = sum(f.stat().st_size for p in paths for f in p.iterdir())
    print(f"{len(paths)} runs, {size / 1024:.0f} KiB -> {a.dst}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
