"""Pipelined simulator speed: 2048-request probes of llama2_70b_tp4pp2_strict, plain vs fast-forward.

For each policy and rate, runs the probe (harness.search.probe.run_probe on the sim backend) with
plain stepping (fast_forward=False) and with the pipelined replay (fast_forward=True), prints both wall times,
the speedup and the preemptions, and checks that the records are bit-identical (token times,
first-scheduled and finish times, preemptions).

    python benchmarks/bench_sim_pipeline.py [--qps 0.5,4] [--requests 2048] [--no-plain]
"""
from __future__ import annotations

import argparse
import time
from dataclasses import replace

import numpy as np

from harness.backends import open_backend
from harness.config import compose
from harness.config import plan_experiment
from harness.search.probe import run_probe


def probe(plan, name: str, qps: float, fast: bool):
    t0 = time.perf_counter()
    planned = replace(plan, backend=replace(plan.backend, fast_forward=fast))
    with open_backend(planned.job(name, progress=False)) as backend:
        out = run_probe(planned, name, qps, backend.run)
    return time.perf_counter() - t0, out.records


def same(a, b) -> bool:
    return all(
        np.array_equal(x.token_times_s, y.token_times_s)
        and np.array_equal([x.first_scheduled_s, x.finished_s], [y.first_scheduled_s, y.finished_s], equal_nan=True)
        and x.num_preemptions == y.num_preemptions
        for x, y in zip(a, b)
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--qps", default="0.5,4", help="comma-separated rates (a low and a high one)")
    ap.add_argument("--requests", type=int, default=2048)
    ap.add_argument("--experiment", default="llama2_70b_tp4pp2_strict")
    ap.add_argument("--schedulers", default="sarathi,vllm,orca")
    ap.add_argument("--no-plain", action="store_true", help="time the fast path only")
    args = ap.parse_args()
    cfg = compose([f"experiment={args.experiment}", f"search.num_requests={args.requests}"])
    plan = plan_experiment(cfg)
    print(f"{plan.deployment.description}, {args.requests} requests")
    print(f"{'policy':<10}{'QPS':>6}{'plain s':>9}{'fast s':>8}{'speedup':>9}{'preempt':>9}  identical")
    for name in args.schedulers.split(","):
        for qps in (float(q) for q in args.qps.split(",")):
            fast_s, fast = probe(plan, name, qps, True)
            preempt = sum(r.num_preemptions for r in fast)
            if args.no_plain:
                print(f"{name:<10}{qps:>6g}{'-':>9}{fast_s:>8.2f}{'-':>9}{preempt:>9}  -")
                continue
            plain_s, plain = probe(plan, name, qps, False)
            print(f"{name:<10}{qps:>6g}{plain_s:>9.2f}{fast_s:>8.2f}{plain_s / fast_s:>8.1f}x{preempt:>9}  {same(plain, fast)}")


if __name__ == "__main__":
    main()
