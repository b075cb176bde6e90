"""How many replicas a target load needs, and why capacity per replica x replicas is the answer.

A Poisson stream of rate L sent to R replicas, each request to a replica chosen at random
(independently, with probability 1/R), gives each replica a Poisson stream of rate L / R, and
the R streams are independent (thinning). Every replica then sees exactly the load a single
replica's capacity probe saw, so R = ceil(L / capacity) replicas meet the SLO, and the fleet's
latency distribution is one replica's (P50 TTFT and P99 TBT at L / R are those of the fleet).

Where it is not exact:
  * round robin or least-outstanding routing: each replica's arrivals are more regular than
    Poisson (round robin gives Erlang-R gaps), so replicas do better: R is an upper bound
    (`cluster.instances=R cluster.router=round_robin` simulates the cluster itself);
  * bursty arrivals (arrival=gamma with CV > 1, a trace): a random split of a renewal stream is
    not the same stream slowed down (its gaps' CV moves towards 1), so one replica's probe at
    L / R is not what a replica of the fleet sees; simulate the cluster;
  * the probe's length: a capacity is measured over search.num_requests requests; a fleet
    sending R times as many over the same time is judged over a longer window per replica
    only if each replica's probe is (the median-delay criterion depends on the window);
  * session affinity or prefix-cache routing: not a random split at all.
"""
from __future__ import annotations

import math

POISSON_NOTE = ("replicas = ceil(target / capacity): a Poisson load split at random over R replicas is Poisson "
                "of rate target/R at each (exact for random routing; round robin and least-outstanding do better, "
                "bursty or traced arrivals need cluster.instances=R to check)")


def replicas_needed(target_qps: float, capacity_qps: float) -> int | None:
    """Replicas of `capacity_qps` each that serve `target_qps`; None when the capacity is 0."""
    if not capacity_qps > 0:
        return None
    return max(1, math.ceil(target_qps / capacity_qps * (1 - 1e-12)))


def gpus_needed(target_qps: float, capacity_qps: float, gpus_per_replica: int) -> int | None:
    r = replicas_needed(target_qps, capacity_qps)
    return None if r is None else r * gpus_per_replica


def competitive_rate(target_qps: float | None, best_capacity: float, best_gpus: int, gpus: int) -> float:
    """The least capacity a configuration of `gpus` per replica needs to rank with the best so far
    (`best_capacity` on `best_gpus` per replica): as few GPUs for the target, or, with no target,
    as much capacity per GPU. inf when one replica already needs more GPUs than the best fleet."""
    if target_qps is None:
        return best_capacity / best_gpus * gpus
    fleet = gpus_needed(target_qps, best_capacity, best_gpus)
    most = (fleet or 0) // gpus
    return math.inf if most == 0 else target_qps / most


def rank_key(target_qps: float | None, capacity_qps: float, gpus: int) -> tuple:
    """Smaller is better: fewest GPUs for the target, then most capacity per GPU (with no target:
    capacity per GPU alone). A configuration that passes no rate ranks last."""
    if not capacity_qps > 0:
        return (math.inf, 0.0)
    per_gpu = capacity_qps / gpus
    if target_qps is None:
        return (-per_gpu,)
    return (gpus_needed(target_qps, capacity_qps, gpus), -per_gpu)
