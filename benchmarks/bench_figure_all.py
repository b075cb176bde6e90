"""What `figure=all` costs, cell by cell and study by study: every cell of every study
(harness.analysis.studies.STUDIES) run once, one after another in this process, into a fresh
results directory, each timed by CPU (this process and its children) and by the wall clock.

    python benchmarks/bench_figure_all.py [--out DIR] [--studies serve,pd,...] [--sample K] [--log FILE] [--jobs]
                                          [--override KEY=VALUE ...]

One line a cell as it ends (so a partial run is still a profile), then a table per study: cells,
CPU seconds, and the 2-core wall time the study's cells would take if two jobs ran side by side
(the figure command's default n_jobs=2): the longest-first packing of its cells' CPU times on two
cores. The total's 2-core time is half its CPU time, the least two idle cores can take. CPU time
is this host's; a loaded host stretches the wall clock more than it does CPU time. `--sample K`
runs every K-th cell of each study only (its first, then every K-th) and scales each study's sum
to all its cells: a projection, printed as one, for a host where the whole matrix would take too long.
`--jobs` runs the cells as figure=all's jobs instead (harness.commands.jobs: configs that differ
only in their SLO and name as one job, sharing their probes), one job a line, and also prints the
2-core time of the jobs in figure=all's order (what the order costs against longest-first).
`--override` adds overrides to every cell (e.g. search.stop_early=true, to compare a knob's cost);
each job's line then also says its runs' capacities, to compare the answers.
"""
from __future__ import annotations

import argparse
import heapq
import os
import resource
import sys
import tempfile
import time


def cpu_now() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def two_cores(times: list[float], cores: int = 2) -> float:
    """The wall time of jobs taken in the given order by the first free of `cores` workers."""
    free = [0.0] * cores
    for t in times:
        heapq.heappush(free, heapq.heappop(free) + t)
    return max(free)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="results directory (default: a fresh temporary one)")
    ap.add_argument("--studies", default="", help="comma-separated study names (default: all)")
    ap.add_argument("--sample", type=int, default=1, help="run every K-th cell of each study, count it K times")
    ap.add_argument("--log", default=None, help="also append each cell's line to this file")
    ap.add_argument("--jobs", action="store_true", help="run figure=all's jobs (cells sharing probes together)")
    ap.add_argument("--override", action="append", default=[], help="an override added to every cell (repeatable)")
    args = ap.parse_args()

    from harness.analysis.studies import run_order

    wanted = set(filter(None, args.studies.split(",")))
    out = args.out or tempfile.mkdtemp(prefix="figure_all_")
    cells, seen = [], {}
    for s, c in run_order():
        k = seen[s.name] = seen.get(s.name, -1) + 1
        if (not wanted or s.name in wanted) and k % args.sample == 0:
            cells.append((s.name, c))
    ran = {n: sum(1 for name, _ in cells if name == n) for n in seen}
    weights = {n: (seen[n] + 1) / ran[n] for n in seen if ran[n]}  # each cell run stands for this many
    print(f"{len(cells)} cells into {out}; host load {os.getloadavg()[0]:.2f}", flush=True)
    per: dict[str, list[float]] = {}
    order: list[float] = []  # every cell's (job's, with --jobs) CPU s, in run order
    jobs = _jobs(cells, out) if args.jobs else [(study, [cell.name], [cell]) for study, cell in cells]
    for k, (study, names, members) in enumerate(jobs, 1):
        c0, w0 = cpu_now(), time.perf_counter()
        capacities = _run(members, out, args.override)
        cpu, wall = cpu_now() - c0, time.perf_counter() - w0
        per.setdefault(study, []).append(cpu)
        order.append(cpu)
        line = (f"[{k}/{len(jobs)}] {study} {'+'.join(names)}: {cpu:.1f} CPU s, {wall:.1f} s wall, "
                f"load {os.getloadavg()[0]:.2f}" + (f"; capacities {capacities}" if args.override else ""))
        print(line, flush=True)
        if args.log:
            with open(args.log, "a") as f:
                f.write(line + "\n")
    print(f"\n{'study':<12} {'jobs' if args.jobs else 'cells':>5} {'CPU s':>8} {'2 cores s':>10}"
          + (f"  (every {args.sample}th cell run, scaled to the study's cells: projected)" if args.sample > 1 else ""))
    total = 0.0
    for study, times in per.items():
        w = weights[study]
        total += w * sum(times)
        print(f"{study:<12} {len(times):>5} {w * sum(times):>8.1f} {w * two_cores(sorted(times, reverse=True)):>10.1f}")
    print(f"{'all':<12} {len(order):>5} {total:>8.1f} {total / 2:>10.1f}  (at best: half the CPU on 2 cores)")
    if args.jobs and args.sample == 1:
        print(f"the jobs in figure=all's order on 2 cores: {two_cores(order):.1f} s; longest first: "
              f"{two_cores(sorted(order, reverse=True)):.1f} s (CPU time as wall: a projection for idle cores)")
    return 0


def _jobs(cells, out: str):
    """(study, names, cells) of each job figure=all runs (harness.commands.jobs._groups), in its order."""
    from harness.commands.jobs import _groups
    from harness.config import compose

    configs = [compose([*c.overrides, f"results_dir={out}", "progress=false"]) for _, c in cells]
    return [(cells[g[0]][0], [cells[i][1].name for i in g], [cells[i][1] for i in g]) for g in _groups(configs)]


def _run(members, out: str, extra: list[str]) -> dict[str, float | None]:
    """The cells of one job in this process, sharing their probes as figure=all's job does (one
    cell alone: as without sharing); returns each run's capacities (cell/scheduler: QPS)."""
    import contextlib
    import io

    from harness.commands.jobs import PER_SCHEDULER
    from harness.commands.run import run_experiment
    from harness.config import compose
    from harness.search.probe import shared_probes

    import json

    from omegaconf import OmegaConf

    capacities = {}
    with shared_probes() as shared, contextlib.redirect_stdout(io.StringIO()):
        for cell in members:
            cfg = compose([*cell.overrides, *extra, f"results_dir={out}", "progress=false"])
            schedulers = OmegaConf.to_container(cfg, resolve=True).get(PER_SCHEDULER) or {}
            shared.settings = {str(k): json.dumps(v, sort_keys=True, default=str) for k, v in schedulers.items()}
            summary = json.loads((run_experiment(cfg, one_of_many=True) / "summary.json").read_text())
            for name, entry in summary["schedulers"].items():
                capacities[f"{cell.name}/{name}"] = entry.get("capacity_qps")
    return capacities


if __name__ == "__main__":
    sys.exit(main())
