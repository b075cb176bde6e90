"""Performance-model speed: predictions per second for single mixed batches and for vectorized
runs of decode iterations, on the paper's four deployments.

    python benchmarks/bench_perf_model.py [--seconds 1.0]

Single batch: ~100 items (one 512-token prefill chunk, a few smaller chunks, the rest decodes),
priced with iteration_time. Vectorized: a (300, 128) array of decode steps (context growing by one
per step), priced with one batch_times call; reported as calls/s and iterations/s.
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
    mixed_new = np.concatenate([[512, 200, 37], np.ones(97, dtype=np.int64)])
    mixed_ctx = np.concatenate([[1024, 0, 3000], rng.integers(10, 6000, size=97)])
    steps, batch = 300, 128
    dec_new = np.ones((steps, batch), dtype=np.int64)
    dec_ctx = rng.integers(10, 6000, size=batch)[None, :] + np.arange(steps)[:, None]
    print(f"{'deployment':52s} {'single/s':>10s} {'best us':>8s} {'(300,128)/s':>12s} {'best ms':>8s} {'iters/s':>10s}")
    for spec in DEPLOYMENTS:
        perf = PerfModel(Deployment.create(**spec))
        single, single_best = rate(lambda: perf.iteration_time(mixed_new, mixed_ctx), args.seconds)
        vec, vec_best = rate(lambda: perf.batch_times(dec_new, dec_ctx), args.seconds)
        print(f"{perf.deployment.describe()[:52]:52s} {single:10.0f} {single_best * 1e6:8.0f} "
              f"{vec:12.0f} {vec_best * 1e3:8.3f} {vec * steps:10.0f}")


if __name__ == "__main__":
    main()
