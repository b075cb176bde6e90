"""The Figs 10-11 matrix (the paper's 8 capacity cells, 3 schedulers each) run through each
launcher on this machine: wall time per launcher, the same capacities from each (issue 13 item 6).

Each launcher gets its own results directory and no probe cache, so every run simulates every
probe; the time includes starting what the launcher needs (a local Ray: its start-up is also
printed on its own). joblib and submitit_local start `n_jobs` / all jobs as local processes,
ray runs each job as a Ray task of one CPU on a local Ray of this machine's cores.

    python benchmarks/bench_matrix_launchers.py [--requests 128] [--launchers joblib,ray,submitit_local]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path

from harness.analysis.matrix import paper_matrix
from harness.commands.jobs import run_configs
from harness.config import compose


def capacities(results: Path) -> dict[tuple[str, str], float]:
    out = {}
    for path in results.glob("*/*/summary.json"):
        s = json.loads(path.read_text())
        for name, entry in s["schedulers"].items():
            out[(s["experiment"], name)] = entry["capacity_qps"]
    return out


def ray_startup_s() -> float:
    from harness.launch import ray_session

    t0 = time.perf_counter()
    connected = ray_session.connect({})
    wall = time.perf_counter() - t0
    ray_session.disconnect(connected)
    return wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=128, help="requests per probe (the paper: 2048)")
    ap.add_argument("--results", default="/tmp/bench_matrix_launchers")
    ap.add_argument("--launchers", default="joblib,ray,submitit_local")
    ap.add_argument("--n-jobs", type=int, default=os.cpu_count() or 2, help="joblib's processes")
    a = ap.parse_args()
    cells = paper_matrix(include_extras=False)
    print(f"{len(cells)} cells x 3 schedulers, {a.requests} requests per probe, {os.cpu_count()} cores, "
          f"joblib n_jobs={a.n_jobs}")
    walls, caps = {}, {}
    for launcher in a.launchers.split(","):
        results = Path(a.results) / launcher
        configs = [compose([*c.overrides, f"results_dir={results}", "progress=false", "cache=false",
                            f"search.num_requests={a.requests}"]) for c in cells]
        log = Path(a.results) / f"{launcher}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        with open(log, "w") as f, contextlib.redirect_stdout(f):
            run_configs(configs, n_jobs=a.n_jobs, only_missing=False, launcher=launcher)
        walls[launcher] = time.perf_counter() - t0
        caps[launcher] = capacities(results)
        print(f"  {launcher:<16}{walls[launcher]:>8.1f} s  ({len(caps[launcher])} searches; output in {log})", flush=True)
    if "ray" in walls:
        print(f"  local Ray start-up alone: {ray_startup_s():.1f} s")
    first = next(iter(caps.values()))
    same = all(c == first for c in caps.values())
    print(f"capacities identical across launchers: {'yes' if same else 'NO'}")
    if "joblib" in walls:
        for launcher, wall in walls.items():
            if launcher != "joblib":
                print(f"  {launcher} / joblib wall time: {wall / walls['joblib']:.2f}x")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
