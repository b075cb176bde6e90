"""The fleet study's agents collapse under prefix-aware routing (docs/fleet.md): its cause switched off.

One probe of the study's fleet (experiments/experiment/fleet_qwen3_32b_h100.yaml: 8 Qwen3-32B replicas,
prefix caching on) with agent transcripts at 4 QPS, Sarathi-Serve, behind load-only routing, behind
prefix-aware routing with its default balance threshold, and with the threshold at 8: requests per
replica, the router's decisions by branch, and the median scheduling delay (the criterion that fails).

    python benchmarks/fleet_prefix_balance.py [--qps 4] [--requests 4096]
"""
from __future__ import annotations

import argparse
import statistics

from harness.backends import open_backend
from harness.config import compose
from harness.config import plan_experiment
from harness.search.probe import probe_requests

CASES = (("least_outstanding", None), ("prefix_aware", None), ("prefix_aware", "{balance_abs_threshold: 8}"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--qps", type=float, default=4.0)
    ap.add_argument("--requests", type=int, default=4096)
    args = ap.parse_args()
    for router, options in CASES:
        over = ["experiment=fleet_qwen3_32b_h100", "dataset=agent_transcripts", f"cluster.router={router}",
                f"search.num_requests={args.requests}", "scheduler=[sarathi]"]
        if options:
            over.append(f"cluster.router_options={options}")
        plan = plan_experiment(compose(over))
        with open_backend(plan.job("sarathi", progress=False)) as backend:
            run = backend.run(probe_requests(plan, args.qps))
        delay = statistics.median(r.first_scheduled_s - r.arrival_s for r in run.records
                                  if r.first_scheduled_s == r.first_scheduled_s)
        print(f"{router:18s} {options or 'defaults':28s} requests per replica {run.diagnostics['instance_requests']}  "
              f"decisions {run.diagnostics.get('router_decisions', '-')}  median scheduling delay {delay:.2f} s", flush=True)


if __name__ == "__main__":
    main()
