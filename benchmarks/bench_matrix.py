"""The whole paper matrix end to end: every cell through `python -m harness`, then the report.

Prints wall time per cell and for the analysis (load + figures + REPORT.md), so a slowdown in the
simulator or in the analysis layer shows up in one number each.

    python benchmarks/bench_matrix.py [--requests 128] [--results /tmp/bench_matrix] [--main-only]
    python benchmarks/bench_matrix.py --analysis-only --results results   # time the report on existing results
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from harness.analysis.matrix import paper_matrix
from harness.analysis.report import write_report


def run_cell(overrides: tuple[str, ...], results: Path, requests: int | None) -> tuple[float, int]:
    extra = [f"results_dir={results}", "progress=false"]
    if requests is not None and not any(o.startswith("search.num_requests=") for o in overrides):
        extra.append(f"search.num_requests={requests}")
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "harness", *overrides, *extra], capture_output=True, text=True)
    if proc.returncode:
        print(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "(no stderr)", file=sys.stderr)
    return time.perf_counter() - t0, proc.returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=128, help="requests per probe (the paper: 2048)")
    ap.add_argument("--results", default="/tmp/bench_matrix")
    ap.add_argument("--figures", default=None, help="default: RESULTS/figures")
    ap.add_argument("--main-only", action="store_true", help="the 8 presets only")
    ap.add_argument("--analysis-only", action="store_true", help="skip the runs; time the report on --results")
    a = ap.parse_args()
    results = Path(a.results)
    figures = Path(a.figures) if a.figures else results / "figures"
    total, failed = 0.0, 0
    if not a.analysis_only:
        cells = paper_matrix(include_extras=not a.main_only)
        print(f"{len(cells)} cells, {a.requests} requests per probe -> {results}")
        for c in cells:
            wall, rc = run_cell(c.overrides, results, a.requests)
            total += wall
            failed += rc != 0
            print(f"  {c.name:<28}{wall:>8.1f} s{'' if rc == 0 else f'  FAILED (exit {rc})'}")
        print(f"runs: {total:.1f} s total, {failed} failed")
    t0 = time.perf_counter()
    path = write_report(results, figures)
    print(f"analysis: {time.perf_counter() - t0:.1f} s -> {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
