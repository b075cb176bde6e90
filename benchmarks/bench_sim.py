"""Simulator speed: one 2048-request openchat_sharegpt4 probe on Yi-34B TP2 (2x A100-80G), per policy.

Prints wall time, simulated requests and iterations per second of wall time, how many of the
iterations the decode-run fast-forward priced in bulk, and the share of the wall time spent in the
performance model (the rest is the engine's scheduling and bookkeeping). Then times one whole
capacity search.

    python benchmarks/bench_sim.py [--qps 1.0] [--requests 2048] [--repeats 5]
"""
from __future__ import annotations

import argparse
import time
from dataclasses import replace

import numpy as np

from harness.backends import open_backend
from harness.config import compose
from harness.config import plan_experiment
from harness.search.probe import run_probe, search_capacity


class CountingTimer:
    """Wraps the deployment's timer to count iterations priced (one row = one iteration) and the
    seconds spent pricing them, through the methods the simulator calls (harness/backends/sim/timer.py)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.calls = 0
        self.iterations = 0
        self.seconds = 0.0

    def _timed(self, fn, rows, *args):
        t0 = time.perf_counter()
        out = fn(*args)
        self.seconds += time.perf_counter() - t0
        self.calls += 1
        self.iterations += rows(out)
        return out

    def batch_times(self, new_tokens, context_lens):
        return self._timed(self.inner.batch_times, np.size, new_tokens, context_lens)

    def stage_times(self, new_tokens, context_lens):
        return self._timed(self.inner.stage_times, lambda out: int(np.size(out)) // self.inner.pp, new_tokens, context_lens)

    def iteration_time(self, new_tokens, context_lens):
        return self._timed(self.inner.iteration_time, lambda _: 1, new_tokens, context_lens)

    def iteration_stage_times(self, new_tokens, context_lens):
        return self._timed(self.inner.iteration_stage_times, lambda _: 1, new_tokens, context_lens)

    def decode_run_times(self, base, lo, hi):
        return self._timed(self.inner.decode_run_times, len, base, lo, hi)

    def decode_run_stage_times(self, base, lo, hi):
        return self._timed(self.inner.decode_run_stage_times, len, base, lo, hi)

    def decode_time_floor(self, batch_size):  # prices nothing: not counted
        floor_of = getattr(self.inner, "decode_time_floor", None)
        return floor_of(batch_size) if floor_of is not None else None

    def alone_decode_times(self, top):  # a table priced once per context: not counted
        alone = getattr(self.inner, "alone_decode_times", None)
        return alone(top) if alone is not None else None

    def pp_send_time(self, num_tokens):
        return self.inner.pp_send_time(num_tokens)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--qps", type=float, default=1.0)
    ap.add_argument("--requests", type=int, default=2048)
    ap.add_argument("--experiment", default="yi34b_tp2_strict")
    ap.add_argument("--repeats", type=int, default=1, help="probes per policy; the fastest is reported")
    args = ap.parse_args()
    cfg = compose([f"experiment={args.experiment}", f"search.num_requests={args.requests}",
                   "scheduler=[sarathi,vllm,orca,fastertransformer,hybrid_only,chunked_only]"])
    plan = plan_experiment(cfg)
    print(f"{plan.deployment.description}, {args.requests} requests at {args.qps} QPS")
    # CPU seconds beside wall seconds: on a shared machine the wall clock counts other jobs' time too.
    print(f"{'policy':<18}{'wall s':>8}{'cpu s':>8}{'req/s':>10}{'iter/s':>12}{'iterations':>12}{'bulk %':>8}"
          f"{'model %':>8}{'P99 TBT':>9}")
    for name in plan.schedulers:
        wall = cpu = float("inf")
        for _ in range(max(args.repeats, 1)):  # best of N: a shared machine only ever adds time
            timer = CountingTimer(plan.deployment.timer)
            counted = replace(plan, deployment=replace(plan.deployment, timer=timer))
            t0, c0 = time.perf_counter(), time.process_time()
            with open_backend(counted.job(name, progress=False)) as backend:
                out = run_probe(counted, name, args.qps, backend.run)
            wall, cpu = min(wall, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
        bulk = 100 * (timer.iterations - timer.calls) / max(timer.iterations, 1)
        print(f"{name:<18}{wall:>8.2f}{cpu:>8.2f}{args.requests / wall:>10.0f}{timer.iterations / wall:>12.0f}"
              f"{timer.iterations:>12}{bulk:>7.0f}%{100 * timer.seconds / wall:>7.0f}%{out.verdict.tbt_s:>8.3f}s")
    for name in ("sarathi", "vllm", "orca"):
        t0, c0 = time.perf_counter(), time.process_time()
        with open_backend(plan.job(name, progress=False)) as backend:
            r = search_capacity(plan, name, backend.run)
        print(f"capacity search {name}: {time.perf_counter() - t0:.1f} s wall, {time.process_time() - c0:.1f} s cpu, "
              f"{len(r.probes)} probes, capacity {r.capacity_qps:.3g} QPS")


if __name__ == "__main__":
    main()
