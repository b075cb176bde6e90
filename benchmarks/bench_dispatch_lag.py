"""The load generator's own dispatch lag (request head on the socket - planned send) against the
in-repo server with the null executor (zero-time iterations), 4-token streams, at a few rates.

    python benchmarks/bench_dispatch_lag.py [--rates 100,400,1000] [--seconds 5]

Prints P50/P99/max lag and failed requests per rate: what the client adds before a request
leaves, the floor under every live measurement.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from harness.backends.live.lifecycle import LaunchSpec, ServerProcess, free_port
from harness.loadgen import LoadOptions, run_load
from harness.records import RequestSpec

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="100,400,1000", help="comma-separated requests per second")
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args()
    port = free_port()
    cmd = [sys.executable, "-m", "engines.server", "--model", "tiny", "--port", str(port), "--executor", "null",
           "--max-model-len", "512"]
    spec = LaunchSpec(cmd, f"http://127.0.0.1:{port}", model="tiny", env={"PYTHONPATH": str(ROOT)}, cwd=str(ROOT))
    print(f"{'rate':>6}{'P50 lag ms':>12}{'P99 lag ms':>12}{'max ms':>9}{'failed':>8}")
    with ServerProcess(spec):
        for rate in (float(r) for r in args.rates.split(",")):
            n = int(rate * args.seconds)
            reqs = [RequestSpec(i, i / rate, 16, 4, tuple(range(10, 26))) for i in range(n)]
            res = run_load(reqs, LoadOptions(base_url=spec.base_url, model="tiny", progress=False))
            lag = res.dispatch_lag_s * 1e3
            failed = sum(r.error is not None for r in res.records)
            print(f"{rate:>6g}{np.nanmedian(lag):>12.3f}{np.nanquantile(lag, 0.99):>12.3f}{np.nanmax(lag):>9.2f}{failed:>8}")


if __name__ == "__main__":
    main()
