"""Performance-model speed: predictions per second for single mixed batches and for vectorized
runs of decode iterations, on the paper's four deployments.

    python benchmarks/bench_perf_model.py [--seconds 1.0]

Single batch: ~100 items (97 decodes, then a 512-token prefill chunk and two smaller ones, as
Batch.mixed orders them), priced as the simulator prices a stepped iteration (iteration_time on
tuples: the table-driven BatchPricer) and by the vectorized reference (batch_times on a (1, B)
array). Decode run: 300 decode steps of 128 sequences (context growing by one per step), priced as
the simulator's fast-forward does (decode_run_times) and by the reference (batch_times on the
(300, 128) array); reported as best microseconds a call and iterations/s.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engines.perf import Deployment, PerfModel  # noqa: E402

DEPLOYMENTS = [
    dict(model="mistral-7b", gpu="a100-80g-sxm", tp=1, pp=1),
    dict(model="yi-34b", gpu="a100-80g-sxm", tp=2, pp=1),
    dict(model="llama2-70b", gpu="a40", tp=4, pp=2, topology="paper_a40"),
    dict(model="falcon-180b", gpu="a100-80g-sxm", tp=4, pp=2, topology="paper_a100"),
]


def rate(fn, seconds: float) -> tuple[float, float]:
    """(calls per second, best single-call seconds) over about `seconds` of repeated calls."""
    fn()
    calls, best, start = 0, float("inf"), time.perf_counter()
    while True:
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        best = min(best, t1 - t0)
        calls += 1
        if t1 - start >= seconds:
            return calls / (t1 - start), best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=1.0, help="time spent per measurement")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    mixed_new = np.concatenate([np.ones(97, dtype=np.int64), [512, 200, 37]])
    mixed_ctx = np.concatenate([rng.integers(10, 6000, size=97), [1024, 0, 3000]])
    new_t, ctx_t = tuple(mixed_new.tolist()), tuple(mixed_ctx.tolist())
    steps, batch = 300, 128
    base = rng.integers(10, 6000, size=batch)
    dec_new = np.ones((steps, batch), dtype=np.int64)
    dec_ctx = base[None, :] + np.arange(steps)[:, None]
    print(f"{'deployment':44s} {'batch us':>9s} {'(ref)':>7s} {'run ms':>8s} {'(ref)':>7s} {'run iters/s':>12s}")
    for spec in DEPLOYMENTS:
        perf = PerfModel(Deployment.create(**spec))
        _, one = rate(lambda: perf.iteration_time(new_t, ctx_t), args.seconds)
        _, one_ref = rate(lambda: perf.batch_times(mixed_new[None], mixed_ctx[None]), args.seconds)
        runs, run = rate(lambda: perf.decode_run_times(base, 0, steps), args.seconds)
        _, run_ref = rate(lambda: perf.batch_times(dec_new, dec_ctx), args.seconds)
        print(f"{perf.deployment.describe()[:44]:44s} {one * 1e6:9.1f} {one_ref * 1e6:7.0f} {run * 1e3:8.3f} "
              f"{run_ref * 1e3:7.3f} {runs * steps:12.0f}")


if __name__ == "__main__":
    main()
