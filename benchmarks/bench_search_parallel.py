"""One capacity search, serial vs W probes at once (search.workers): rounds and wall time.

Each W searches the same experiment and scheduler from scratch (no probe cache), in a fresh
local process pool of W workers; the pool's start is timed apart from the search. Every W must
give the serial search's capacity and bracket (it stops otherwise). Rounds drop with W wherever
it runs; wall time drops only while the machine has a core per worker.

    python benchmarks/bench_search_parallel.py [--experiment yi34b_tp2_strict] [--scheduler sarathi]
        [--requests 1024] [--workers 2 4 8]
"""
from __future__ import annotations

import argparse
import os
import time

from harness.backends import open_backend
from harness.config import compose
from harness.search.executor import LocalProcessPool
from harness.config import plan_experiment
from harness.search.probe import search_capacity


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--experiment", default="yi34b_tp2_strict")
    ap.add_argument("--scheduler", default="sarathi")
    ap.add_argument("--requests", type=int, default=1024)
    ap.add_argument("--workers", type=int, nargs="+", default=[2, 4, 8])
    args = ap.parse_args()
    overrides = [f"experiment={args.experiment}", f"scheduler=[{args.scheduler}]", f"search.num_requests={args.requests}"]

    plan = plan_experiment(compose(overrides))
    cores = _cores()
    print(f"{plan.name}: {plan.deployment.description}, {args.scheduler}, {args.requests} requests per probe, "
          f"rel_tol {plan.search.rel_tol:g}; {cores} CPU cores here")
    print(f"{'workers':>7}{'rounds':>8}{'probes':>8}{'pool start s':>14}{'search s':>10}{'total s':>9}{'speedup':>9}"
          f"{'rounds ratio':>14}  capacity (bracket)")
    t0 = time.perf_counter()
    with open_backend(plan.job(args.scheduler, progress=False)) as backend:
        base = search_capacity(plan, args.scheduler, backend.run)
    serial_s = time.perf_counter() - t0
    print(f"{1:>7}{base.rounds:>8}{len(base.probes):>8}{'-':>14}{serial_s:>10.2f}{serial_s:>9.2f}{1:>8.2f}x"
          f"{1:>14.2f}  {base.capacity_qps:.4g} [{base.capacity_qps:.4g}, {base.lowest_failing_qps:.4g})")
    for w in args.workers:
        wplan = plan_experiment(compose([*overrides, f"search.workers={w}"]))
        t0 = time.perf_counter()
        with LocalProcessPool(w) as pool:
            list(pool.map_unordered(abs, list(range(w))))  # start every worker first
            started = time.perf_counter()
            r = search_capacity(wplan, args.scheduler, None, executor=pool)
            done = time.perf_counter()
        if r.bracket != base.bracket:
            raise SystemExit(f"W={w} found {r.bracket}, the serial search {base.bracket}: the search is broken")
        total = done - t0
        print(f"{w:>7}{r.rounds:>8}{len(r.probes):>8}{started - t0:>14.2f}{done - started:>10.2f}{total:>9.2f}"
              f"{serial_s / total:>8.2f}x{r.rounds / base.rounds:>14.2f}  same")
    print("rounds ratio: rounds / serial rounds (the ideal for W = 2^s - 1 in the bisection: 1/s); "
          "speedup: serial wall time / total")
    slow = [w for w in args.workers if w > cores]
    if slow:
        print(f"note: this machine has {cores} cores, so W = {', '.join(map(str, slow))} share them: their rounds "
              f"drop but wall time cannot (a round of W probes takes about W/{cores} probe times); "
              f"on a machine or cluster with a core per worker a round takes one probe's time")


if __name__ == "__main__":
    main()
