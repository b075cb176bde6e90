"""How fast the deployment planner answers, and how right: a plan over ~1,000 configurations
(LLaMA-3-70B on H100 nodes, sharegpt, P99 TBT <= 0.1 s, 40 QPS: 10 deployments x 100 scheduler
settings), its wall time and configurations a second, then a full, cold capacity search of the
winner (the paper's: start at search.start_qps, double, bisect to search.rel_tol, every probe of
search.num_requests) against the capacity the plan reported.

    python benchmarks/bench_plan.py                  # the 1,000-configuration plan (goal: <= 15 min on 2 cores)
    python benchmarks/bench_plan.py --quick          # the command's default grid (120 configurations)
    python benchmarks/bench_plan.py --workers 1 --requests 512
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.backends import open_backend  # noqa: E402
from harness.config import compose, experiment_config  # noqa: E402
from harness.planner import answer  # noqa: E402
from harness.planner.search import run_plan  # noqa: E402
from harness.planner.settings import PlanSettings  # noqa: E402
from harness.planner.space import enumerate_space  # noqa: E402
from harness.search.probe import search_capacity  # noqa: E402

BUDGETS = [128, 192, 256, 320, 384, 448, 512, 640, 768, 896, 1024, 1280, 1536, 2048, 3072, 4096]
VLLM = [8, 12, 16, 20, 24, 28, 32, 40, 48, 56, 64, 72, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256, 288, 320,
        352, 384, 416, 448, 480, 512, 768, 1024]
ORCA = [2, 3, 4, 5, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64, 96, 128]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="the default grid of `python -m harness plan` instead")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--requests", type=int, default=2048, help="search.num_requests (the full search)")
    ap.add_argument("--target", type=float, default=40.0)
    args = ap.parse_args()
    words = ["model=llama3-70b", "hardware=h100_80g", "dataset=openchat_sharegpt4", "slo.tbt_s=0.1",
             f"search.num_requests={args.requests}"]
    grid = {} if args.quick else {"sarathi": {"token_budget": BUDGETS, "max_num_seqs": [64, 128, 256]},
                                  "vllm": {"max_num_seqs": VLLM}, "orca": {"max_num_seqs": ORCA}}
    settings = PlanSettings(target_qps=args.target, workers=args.workers, grid=grid)
    cfg = compose(words)
    t0 = time.perf_counter()
    space = enumerate_space(experiment_config(cfg), settings)
    run = run_plan(space, settings, log=lambda m: print(m, flush=True))
    win = answer.winner(run)
    wall = time.perf_counter() - t0
    n = len(run.evaluations)
    counts = {s: sum(e.status == s for e in run.evaluations) for s in ("pruned", "eliminated", "screened", "refined")}
    print(f"plan: {n} configurations ({len(space.plans)} deployments) in {wall:.1f} s wall, {n / wall:.2f} configurations/s, "
          f"{args.workers} workers; {counts}; {run.probes_screen} screening probes of {run.screen_requests} requests, "
          f"{run.probes_full} full probes of {args.requests}")
    for line in answer.table_lines(answer.rows(run, 5)):
        print(line)
    plan = space.plans[(win.candidate.tp, win.candidate.pp)]
    t1 = time.perf_counter()
    with open_backend(plan.job(win.candidate.scheduler, progress=False)) as backend:
        full = search_capacity(plan, win.candidate.scheduler, backend.run)
    diff = (win.capacity_qps - full.capacity_qps) / full.capacity_qps
    print(f"winner {win.candidate.key}: plan {win.capacity_qps:.4g} QPS, full cold search {full.capacity_qps:.4g} QPS "
          f"({len(full.probes)} probes, {time.perf_counter() - t1:.1f} s): {diff:+.1%} (goal: within 5 %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
