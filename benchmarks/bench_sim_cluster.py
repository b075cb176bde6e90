"""Cluster simulation speed (issue 17 items 1 and 6): one 2048-request openchat_sharegpt4 probe on
Yi-34B TP2 (Sarathi, strict budget), one instance at `--qps` against k instances at k x `--qps`
(the same load per instance), per router; then one instance with one k-th of the requests (one
instance's share); then disaggregated layouts of k instances (prefill:decode 1:k-1 .. k-1:1) at the
same load. A k-instance cluster should cost about k times its instances' share run alone; the
4-instance probe should stay under 10 s.

    python benchmarks/bench_sim_cluster.py [--qps 1.0] [--requests 2048] [--instances 4] [--repeats 3]
"""
from __future__ import annotations

import argparse
import time

from engines.routers import ROUTERS
from harness.backends import open_backend
from harness.config import compose
from harness.metrics import summarize
from harness.config import plan_experiment
from harness.search.probe import probe_requests


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--qps", type=float, default=1.0, help="rate per instance")
    ap.add_argument("--requests", type=int, default=2048)
    ap.add_argument("--instances", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    base = ["experiment=yi34b_tp2_strict", "scheduler=[sarathi]", f"search.num_requests={args.requests}"]
    k = args.instances
    cases = [(1, "round_robin", 1, ())] + [(k, r, 1, ()) for r in ROUTERS] + [(1, "round_robin", k, ())]
    cases += [(k, "least_outstanding", 1, (f"cluster.prefill_instances={p}", f"cluster.decode_instances={k - p}",
                                           "cluster.instances=1")) for p in range(1, k)]
    one = None
    for n, router, share, layout in cases:
        plan = plan_experiment(compose([*base, f"cluster.instances={n}", f"cluster.router={router}", *layout]))
        reqs = probe_requests(plan, args.qps * n)[: args.requests // share]
        backend = open_backend(plan.job("sarathi", progress=False))
        best = float("inf")
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            run = backend.run(reqs)
            best = min(best, time.perf_counter() - t0)
        one = best if one is None else one
        s = summarize(run.records)
        what = f"{layout[0].split('=')[1]}P{layout[1].split('=')[1]}D" if layout else f"instances={n}"
        print(f"{what:<11} router={router:<17} qps={args.qps * n:6.2f} requests={len(reqs)} "
              f"wall={best:6.2f}s ({best / one:4.2f}x one instance) p50 delay={s.scheduling_delay.p50:.3f}s "
              f"p99 tbt={s.tbt.p99:.3f}s per instance={_spread(run.diagnostics, len(reqs))}")


def _spread(diag: dict, n: int) -> str:
    if "prefill_instance_requests" in diag:
        return f"prefill {diag['prefill_instance_requests']} decode {diag['decode_instance_requests']}"
    return str(diag.get("instance_requests", [n]))


if __name__ == "__main__":
    main()
