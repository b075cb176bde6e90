"""What the engine core's prefix cache costs the simulator: one probe with the cache off and on.

Off, the engine is the plain one (the same code as before the cache existed: benchmarks/
fingerprint_sim.py checks it bit for bit). On, every admission looks its prompt up and every
completed block is registered: on a workload that shares nothing (openchat_sharegpt4) that is pure
overhead; on conversations it is also what the cache saves (shorter prefills, fewer iterations).

    python benchmarks/bench_prefix_cache.py [--requests 2048] [--repeats 3]
"""
from __future__ import annotations

import argparse
import time

from harness.backends import open_backend
from harness.config import compose
from harness.config import plan_experiment
from harness.search.probe import probe_requests

CASES = [  # (name, overrides, scheduler, qps)
    ("sharegpt4 sarathi", ["experiment=yi34b_tp2_strict"], "sarathi", 1.2),
    ("sharegpt4 vllm", ["experiment=yi34b_tp2_strict"], "vllm", 0.36),
    ("conversations sarathi", ["experiment=yi34b_tp2_strict", "dataset=sharegpt_conversations"], "sarathi", 2.0),
    ("agents sarathi", ["experiment=yi34b_tp2_strict", "dataset=agent_transcripts"], "sarathi", 0.4),
]


def cpu_seconds(overrides: list[str], scheduler: str, qps: float, repeats: int) -> tuple[float, int]:
    plan = plan_experiment(compose(overrides + [f"scheduler=[{scheduler}]"]))
    requests = probe_requests(plan, qps)
    best, cached = float("inf"), 0
    for _ in range(repeats):
        with open_backend(plan.job(scheduler, progress=False)) as backend:
            t = time.process_time()
            records = backend.run(requests, "bench").records
            best = min(best, time.process_time() - t)
        cached = sum(r.cached_tokens for r in records)
    return best, cached


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    print(f"{'probe':24} {'off (CPU s)':>12} {'on (CPU s)':>11} {'on/off':>7}  cached tokens (on)")
    for name, overrides, scheduler, qps in CASES:
        common = overrides + [f"search.num_requests={args.requests}"]
        off, _ = cpu_seconds(common + ["engine.prefix_caching=false"], scheduler, qps, args.repeats)
        on, cached = cpu_seconds(common + ["engine.prefix_caching=true"], scheduler, qps, args.repeats)
        print(f"{name:24} {off:12.2f} {on:11.2f} {on / off:7.2f}  {cached:,}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
