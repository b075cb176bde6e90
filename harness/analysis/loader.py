"""Saved results -> tidy DataFrames. Reads the store harness.results.store writes; never runs anything.

results/<experiment>/<timestamp>/{config.yaml, summary.json, requests.parquet, token_times.parquet}

`load_runs`   one row per (run, scheduler): what was measured (capacity, bracket) and under what
              (deployment, dataset, SLO, scheduler knobs, seed, git commit).
`load_probes` one row per probe of a capacity search (rate, verdict, latency summary).
`load_requests` / `load_token_times` the per-request tables of one run.

Hidden `.<timestamp>.partial` directories are runs still being written (or crashed): skipped.
By default only the newest run of each *cell* is kept (see CELL_KEY), so re-running an
experiment supersedes the old numbers without deleting them.
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from harness.results.schema import PROBE_COLUMNS
from harness.starvation import starvation

# One capacity measurement is identified by these columns. Finer than the experiment name on
# purpose: `experiment=yi34b_tp2_strict dataset=arxiv_summarization` writes to the same
# experiment directory as the sharegpt run, and "latest per experiment" would silently drop one.
# A fixed-rate run (one probe at `fixed_qps`) never supersedes a capacity search, nor another rate.
# A cluster (instances behind a router) is another cell than one engine; runs saved before clusters
# existed read as one instance.
CELL_KEY = ("experiment", "model", "gpu", "parallel", "instances", "router", "layout", "dataset", "slo_kind", "slo_tbt_s", "mode",
            "fixed_qps", "scheduler")

RUN_COLUMNS = (
    "experiment", "run", "run_dir", "timestamp", "model", "gpu", "tp", "pp", "parallel", "instances", "router", "layout", "num_gpus",
    "deployment", "dataset", "num_requests", "slo_kind", "slo_tbt_s", "slo_tbt_quantile",
    "slo_delay_s", "scheduler", "policy", "token_budget", "max_num_seqs", "capacity_qps",
    "bracket_lo_qps", "bracket_hi_qps", "saturated", "num_probes", "num_seeds", "capacity_mean_qps",
    "capacity_std_qps", "mode", "fixed_qps", "seed", "git_commit", "backend", "settings", "results_from",
    # Beside the criterion, at the capacity probe: starvation's signs (harness.starvation).
    "capacity_ttft_p99_s", "capacity_completed_per_s", "capacity_starvation",
)

Judge = Callable[[dict], str]

_STAMP = re.compile(r"^(\d{8}-\d{6})(?:-(\d+))?$")


@dataclass(frozen=True)
class RunDir:
    experiment: str
    run: str  # the timestamp directory name, e.g. 20261129-100544 or 20261129-100544-1
    path: Path

    @property
    def order(self) -> tuple[str, int]:
        # Two runs in the same second get "-1", "-2"...: sort on the number, not the string.
        m = _STAMP.match(self.run)
        return (m.group(1), int(m.group(2) or 0)) if m else (self.run, 0)


def find_runs(results_dir: str | Path) -> list[RunDir]:
    """Every finished run under results_dir (experiment/timestamp/summary.json), oldest first."""
    root = Path(results_dir)
    exps = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")) if root.is_dir() else []
    # A partial run is hidden (".<stamp>.partial"); a run without summary.json is not a run.
    out = [RunDir(exp.name, run.name, run) for exp in exps for run in exp.iterdir()
           if run.is_dir() and not run.name.startswith(".") and (run / "summary.json").is_file()]
    return sorted(out, key=lambda r: (r.order, r.experiment))


# libyaml's loader when present: the pure-Python one takes ~50 ms per resolved config, which
# dominates loading a results tree.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def deployment_fields(config: dict) -> dict:
    """model, gpu, tp, pp, parallel, instances and dataset of a run's saved config.yaml."""
    par = config.get("parallel") or {}
    tp, pp = int(par.get("tp", 1)), int(par.get("pp", 1))
    return {"model": (config.get("model") or {}).get("name"), "gpu": (config.get("hardware") or {}).get("gpu"),
            "tp": tp, "pp": pp, "parallel": f"tp{tp}" if pp == 1 else f"tp{tp}pp{pp}",  # the experiments/parallel preset
            "instances": int((config.get("cluster") or {}).get("instances", 1)),
            "dataset": (config.get("dataset") or {}).get("name")}


def _run_fields(r: RunDir, summary: dict, config: dict, judge: Judge | None) -> dict:
    deployment = deployment_fields(config)
    tp, pp, instances = deployment["tp"], deployment["pp"], deployment["instances"]
    slo = summary.get("slo") or {}
    workload = summary.get("workload") or {}
    cluster = config.get("cluster") or {}
    # Prefill/decode roles or instances of different deployments: the layout names the cell.
    has_layout = cluster.get("prefill_instances") or cluster.get("decode_instances") or cluster.get("replicas")
    dp = int((config.get("parallel") or {}).get("dp", 1))  # data-parallel ranks of tp x pp GPUs each (1 before it existed)
    return {
        "experiment": summary.get("experiment", r.experiment), "run": r.run, "run_dir": str(r.path),
        "timestamp": pd.to_datetime(summary.get("created"), utc=True, errors="coerce"), **deployment,
        "router": str(cluster.get("router", "round_robin")),
        # a disaggregated or mixed cluster's instances (its summary says them; '' for replicas of one deployment)
        "layout": str((summary.get("cluster") or {}).get("layout") or "") if has_layout else "",
        # saved since goodput per GPU (harness.commands.run.num_gpus); else counted as it counts them, DP ranks included
        "num_gpus": int(summary.get("num_gpus") or tp * pp * dp * instances),
        "deployment": summary.get("deployment"), "dataset": workload.get("dataset") or deployment["dataset"],
        "num_requests": workload.get("num_requests"), "slo_kind": slo.get("kind"), "slo_tbt_s": slo.get("tbt_s"),
        "slo_tbt_quantile": slo.get("tbt_quantile"), "slo_delay_s": slo.get("scheduling_delay_s"),
        # "capacity" (a search per scheduler) or "fixed_rate" (one probe per scheduler at one QPS)
        "mode": summary.get("mode", "capacity"),
        "fixed_qps": nan_if_none((config.get("search") or {}).get("fixed_qps")), "seed": summary.get("seed"),
        "git_commit": summary.get("git_commit"), "backend": summary.get("backend"),
        # "" at the paper's settings, else why not (harness.analysis.settings); None when not judged.
        "settings": judge(config) if judge else None,
        "results_from": str(r.path.parent.parent),  # the results directory the run was read from
    }


def nan_if_none(x):
    return float("nan") if x is None else x


def _starvation_of(p: dict) -> str:
    """A probe's starvation flag as saved, or as harness.starvation judges it (runs saved before it)."""
    if "starvation" in p or not p:
        return p.get("starvation") or ""
    return starvation(bool(p.get("passed")), float(p["qps"]), float(p.get("request_throughput") or math.nan),
                      float(p.get("ttft_p99_s") or math.nan))


def _scheduler_fields(name: str, s: dict) -> dict:
    cfg = s.get("config") or {}
    rep = s.get("repeats") or {}
    hi = s.get("lowest_failing_qps")
    cap = next((p for p in s.get("probes") or [] if p.get("passed") and p.get("qps") == s.get("capacity_qps")), {})
    return {
        "scheduler": name, "policy": cfg.get("policy", name), "token_budget": nan_if_none(cfg.get("token_budget")),
        "max_num_seqs": nan_if_none(cfg.get("max_num_seqs")), "capacity_qps": float(s["capacity_qps"]),
        "bracket_lo_qps": float(s["capacity_qps"]),
        # JSON has no infinity: the CLI writes null when nothing failed (saturated search).
        "bracket_hi_qps": float("inf") if hi is None else float(hi),
        "saturated": bool(s.get("saturated", hi is None)), "num_probes": len(s.get("probes") or []),
        # `repeats` exists when the search ran over several seeds; the row's capacity is the first
        # seed's (the one whose token times were saved), the mean and spread are over all seeds.
        "num_seeds": len(rep.get("seeds") or []) or 1,
        "capacity_mean_qps": float(rep.get("mean_qps", s["capacity_qps"])),
        "capacity_std_qps": float(rep.get("std_qps", 0.0)), "capacity_ttft_p99_s": nan_if_none(cap.get("ttft_p99_s")),
        "capacity_completed_per_s": nan_if_none(cap.get("request_throughput")),
        "capacity_starvation": _starvation_of(cap),
    }


def _frame(rows: list[dict], columns: Iterable[str]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=list(columns))
    for c in ("token_budget", "max_num_seqs", "slo_tbt_s", "capacity_qps"):
        if c in df:
            df[c] = pd.to_numeric(df[c])
    return df


def latest_per_cell(runs: pd.DataFrame, probes: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Only the newest run of each CELL_KEY, and those runs' probes."""
    if runs.empty:
        return runs, probes
    # find_runs returns oldest first and rows keep that order: the last of each cell is newest.
    runs = runs.drop_duplicates(list(CELL_KEY), keep="last").reset_index(drop=True)
    return runs, probes_of(runs, probes)


def probes_of(runs: pd.DataFrame, probes: pd.DataFrame) -> pd.DataFrame:
    """The probes of the (run, scheduler) rows in `runs`."""
    keep = set(zip(runs["run_dir"], runs["scheduler"]))
    mask = np.array([k in keep for k in zip(probes["run_dir"], probes["scheduler"])], dtype=bool)  # rows, even when none
    return probes[mask].reset_index(drop=True)


def at_capacity(probes: pd.DataFrame, run_dir: str, scheduler: str, column: str) -> float:
    """`column` of the probe at the capacity of `scheduler` in the run at `run_dir` (NaN without one)."""
    if probes.empty or column not in probes:
        return np.nan
    p = probes[(probes["run_dir"] == run_dir) & (probes["scheduler"] == scheduler) & probes["is_capacity"].astype(bool)]
    return float(p[column].iloc[0]) if len(p) else np.nan


def _collect(results_dir: str | Path, judge: Judge | None) -> tuple[list[dict], list[dict]]:
    """Every run read once: (run rows, probe rows), oldest run first."""
    run_rows, probe_rows = [], []
    for r in find_runs(results_dir):
        summary = json.loads((r.path / "summary.json").read_text())
        cfg_path = r.path / "config.yaml"
        config = (yaml.load(cfg_path.read_text(), Loader=_YAML_LOADER) if cfg_path.is_file() else None) or {}
        base = _run_fields(r, summary, config, judge)
        for name, s in (summary.get("schedulers") or {}).items():
            sched = _scheduler_fields(name, s)
            run_rows.append({**base, **sched})
            seeds = [(base["seed"], s)] + [(x.get("seed"), x) for x in (s.get("repeats") or {}).get("runs", [])]
            for seed, search in seeds:
                for i, p in enumerate(search.get("probes") or []):
                    probe = {c: nan_if_none(p.get(c)) for c in PROBE_COLUMNS}
                    is_cap = bool(p.get("passed")) and p.get("qps") == search.get("capacity_qps")
                    probe_rows.append({**base, **sched, **probe, "seed": seed, "run_seed": base["seed"],
                                       "probe_index": i, "is_capacity": is_cap})
    return run_rows, probe_rows


PROBE_FRAME_COLUMNS = (*RUN_COLUMNS, *PROBE_COLUMNS, "run_seed", "probe_index", "is_capacity")


def load_results(results_dir: str | Path, latest: bool = True,
                 judge: Judge | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(load_runs, load_probes) with every file read once. `judge(config)` fills the `settings`
    column (harness.analysis.settings.judge: "" at the paper's settings, else why not)."""
    run_rows, probe_rows = _collect(results_dir, judge)
    runs = _frame(run_rows, RUN_COLUMNS)
    probes = _frame(probe_rows, PROBE_FRAME_COLUMNS)
    return latest_per_cell(runs, probes) if latest else (runs, probes)


def load_runs(results_dir: str | Path, latest: bool = True) -> pd.DataFrame:
    """One row per (run, scheduler). `latest`: only the newest run of each CELL_KEY."""
    return load_results(results_dir, latest)[0]


def load_probes(results_dir: str | Path, latest: bool = True) -> pd.DataFrame:
    """One row per probe, with the run's columns and `is_capacity` (the probe the capacity is).

    A run over several seeds contributes every seed's probes: `seed` is the probe's, `run_seed`
    the run's first (the seed of its row in load_runs and of its saved token times).
    """
    return load_results(results_dir, latest)[1]


def load_requests(run_dir: str | Path, scheduler: str | None = None, qps: float | None = None) -> pd.DataFrame:
    """requests.parquet of one run: one row per request per probe (filtered by scheduler / qps)."""
    df = pd.read_parquet(Path(run_dir) / "requests.parquet")
    if scheduler is not None:
        df = df[df["scheduler"] == scheduler]
    if qps is not None:
        df = df[df["qps"] == qps]
    return df.reset_index(drop=True)


def load_token_times(run_dir: str | Path, scheduler: str | None = None) -> pd.DataFrame:
    """token_times.parquet of one run: every token time of each request at each capacity probe."""
    path = Path(run_dir) / "token_times.parquet"
    if not path.is_file():
        return pd.DataFrame(columns=["scheduler", "seed", "qps", "request_id", "token_times_s"])
    df = pd.read_parquet(path)
    if scheduler is not None:
        df = df[df["scheduler"] == scheduler]
    return df.reset_index(drop=True)
