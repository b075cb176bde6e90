"""The fleet study's runs as `python -m harness` override lists (harness.analysis.study.Cell).

Every cell is a capacity search of experiments/experiment/fleet_qwen3_32b_h100.yaml (8 replicas
of Qwen3-32B on one H100 each, Sarathi-Serve and vLLM, prefix caching on) for one workload, one
router and one KV tier:

  workload  chat (sharegpt_conversations) | agents (agent_transcripts)
  router    least_outstanding (load only) | session_affinity | prefix_aware (the router's own
            index of what it sent where; prefix_exact, which reads each replica's cache, is left
            out: its ties and hits differ from prefix_aware's only where the index misses an
            eviction, and a third cache router would add a third of the study's cost)
  tier      gpu (evicted KV is lost) | offload (each replica's evicted blocks go to a host tier of
            OFFLOAD_GIB, priced over PCIe both ways: engines/perf/offload.py)

and one switched-off variant per workload: `nocache` (prefix caching off, load-only routing), the
fleet with nothing for a router to win, against which every router's gain is read.
"""
from __future__ import annotations

from harness.analysis.study import Cell

PRESET = "fleet_qwen3_32b_h100"
WORKLOADS = {"chat": "sharegpt_conversations", "agents": "agent_transcripts"}
ROUTERS = ("least_outstanding", "session_affinity", "prefix_aware")
INSTANCES = 8  # the preset's cluster.instances (tests/test_analysis_fleet.py checks it)
# Host memory per replica's tier, GiB: a DGX H100 holds 2 TiB of system memory for 8 GPUs (NVIDIA
# DGX H100 datasheet), 256 GiB a GPU; a quarter of it, ~6.5x the replica's ~10 GB GPU KV pool
# (38,960 tokens x 256 KiB a token for Qwen3-32B: 64 layers x 8 KV heads x 128 x 2 x 2 bytes).
OFFLOAD_GIB = 64.0
TIERS = ("gpu", "offload")
NOCACHE = "nocache"
# Requests per probe: a probe's sessions are the most requests in flight at once (each session's
# turns are sequential), so a probe must hold more sessions than 8 replicas serve within the SLO,
# or the search runs to search.max_qps and reports the probe's limit, not the fleet's.
NUM_REQUESTS = {"chat": 4096, "agents": 4096}
# 5 % granularity. The first rate: 6 QPS, near the middle of the capacities found (1.6-18.5 QPS,
# docs/fleet.md): the search of every cell of that table, replayed on its capacity, takes 178 probes
# from 6 QPS against 199 from 4 (-11 %), each capacity within 2 % of the one from 4 QPS, inside
# the 5 % the bisection leaves (benchmarks/RESULTS.md, "figure=all"). A probe stops once its failure
# is certain (search.stop_early; fleet configs share no probes across SLOs, so nothing shared is lost):
# the same capacities, 14 of 14 compared, about 6 % less CPU (benchmarks/RESULTS.md).
SEARCH = ("search.rel_tol=0.05", "search.start_qps=6", "search.stop_early=true")


NAME = (r"^fleet_(?P<workload>chat|agents)_(?P<router>least_outstanding|session_affinity|prefix_aware|prefix_exact)"
        r"_(?P<tier>gpu|offload|nocache)$")


def _cell(workload: str, router: str, tier: str) -> Cell:
    name = f"fleet_{workload}_{router}_{tier}"  # NAME matches it
    over = [f"experiment={PRESET}", f"name={name}", f"dataset={WORKLOADS[workload]}", f"cluster.router={router}",
            f"search.num_requests={NUM_REQUESTS[workload]}", *SEARCH]
    if tier == "offload":
        over.append(f"engine.kv_offload_gib={OFFLOAD_GIB:g}")
    if tier == NOCACHE:
        over.append("engine.prefix_caching=false")
    return Cell(name, tuple(over), "fleet")


def fleet_cells() -> tuple[Cell, ...]:
    cells = [_cell(w, r, t) for w in WORKLOADS for r in ROUTERS for t in TIERS]
    cells += [_cell(w, "least_outstanding", NOCACHE) for w in WORKLOADS]
    return tuple(cells)
