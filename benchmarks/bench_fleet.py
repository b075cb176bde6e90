"""Fleet simulation speed (issue 39 item 4): simulated seconds per CPU second of a fleet of
Mistral-7B replicas (1x A100-80G each, Sarathi-Serve, prefix caching) behind a cache-aware router,
under production-shaped traffic: a diurnal rate (`arrival=diurnal`, the day compressed into
`--day-s`), conversations and agents mixed (half the rate each), sessions released by answers.
The same load per replica at every fleet size, so a fleet of k should cost about k times one
replica; the issue's target is 24 simulated hours of 64 replicas in under 10 minutes on 2 cores.

    python benchmarks/bench_fleet.py [--replicas 1,8,64] [--horizon-s 300] [--qps 1.0] [--router session_affinity]
"""
from __future__ import annotations

import argparse
import dataclasses
import time

from harness.backends import open_backend
from harness.config import compose
from harness.search.experiment import plan_experiment
from harness.search.probe import probe_requests


def _shifted(reqs, id_offset: int, segment_offset: int):
    """Requests of a second workload renumbered past the first's ids and segments (no false sharing)."""
    def seg(s):
        return None if s is None else s + segment_offset
    return [dataclasses.replace(
        r, request_id=r.request_id + id_offset, after=None if r.after is None else r.after + id_offset,
        prompt_segments=tuple((seg(s), n) for s, n in r.prompt_segments), output_segment=seg(r.output_segment))
        for r in reqs]


def fleet_requests(replicas: int, qps: float, horizon_s: float, day_s: float):
    """Conversations and agents at qps/2 per replica each; their plans (the first one runs them)."""
    plans, reqs = [], []
    for dataset in ("sharegpt_conversations", "agent_transcripts"):
        n = max(1, round(qps / 2 * replicas * horizon_s))
        plan = plan_experiment(compose([
            "experiment=mistral7b_strict", f"dataset={dataset}", "scheduler=[sarathi]", "engine.prefix_caching=true",
            f"search.num_requests={n}", "arrival=diurnal", f"arrival.period_s={day_s}", "max_model_len=16384",
            f"cluster.instances={replicas}", f"cluster.router={ROUTER}"]))
        plans.append(plan)
        reqs.append(probe_requests(plan, qps / 2 * replicas))
    conv, agents = reqs
    top = max(max(max(s for s, _ in r.prompt_segments), r.output_segment) for r in conv) + 1
    return plans[0], conv + _shifted(agents, max(r.request_id for r in conv) + 1, top)


ROUTER = "session_affinity"


def main() -> None:
    global ROUTER
    ap = argparse.ArgumentParser()
    ap.add_argument("--replicas", default="1,8,64")
    ap.add_argument("--horizon-s", type=float, default=300.0, help="simulated seconds of arrivals")
    ap.add_argument("--qps", type=float, default=1.0, help="mean rate per replica")
    ap.add_argument("--day-s", type=float, default=600.0, help="the diurnal period, compressed")
    ap.add_argument("--router", default=ROUTER)
    args = ap.parse_args()
    ROUTER = args.router
    for k in (int(x) for x in args.replicas.split(",")):
        plan, reqs = fleet_requests(k, args.qps, args.horizon_s, args.day_s)
        t0 = time.process_time()
        with open_backend(plan.job("sarathi", progress=False)) as backend:
            run = backend.run(reqs)
        cpu = time.process_time() - t0
        done = [r.finished_s for r in run.records if r.finished_s == r.finished_s]
        span = max(done)
        cache = run.diagnostics.get("prefix_cache", {})
        hit = cache.get("hits", 0) / cache["queries"] if cache.get("queries") else float("nan")
        print(f"{k:3d} replicas  {len(reqs):7d} requests  {span:8.0f} sim s  {cpu:8.1f} CPU s  "
              f"{span / cpu:8.1f} sim s per CPU s  hit rate {hit:.3f}  ({ROUTER})", flush=True)


if __name__ == "__main__":
    main()
