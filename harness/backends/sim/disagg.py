"""Disaggregated prefill and decode in the simulator (Splitwise ISCA'24, DistServe OSDI'24).

Prefill instances run each prompt under their own scheduler (whole or chunked, their own token
budget) and stop at its first token; the prompt's KV then moves to a decode instance over the
link between them (`engines.perf.transfer`), which continues the request from its second token
with `DecodeOnlyPolicy`. The first token's time is the prefill instance's; the gap to the second
token includes the transfer, any queueing behind the prefill instance's egress link, and the wait
for a decode slot.

Two passes on one virtual clock: nothing a decode instance does changes a prefill instance (its
KV blocks are freed when the prompt's last chunk completes; what is still in flight on the link
is not charged to its pool, as in DistServe's pull model the decode side fetches what it can hold),
so every prefill instance runs first (`cluster.route_and_run`, routed at arrival), then the
handoffs are routed in the order the prompts finish, each decode instance advanced to that moment
for a stateful router, and each request queued at the decode instance when its KV lands.
"""
from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence as Seq
from dataclasses import replace

import numpy as np

from engines.core import Engine
from engines.perf.transfer import KvTransfer
from engines.routers import Router
from harness.backends.sim.cluster import add_instance_stats, make_instances, route_and_run
from harness.backends.sim.loop import IterationTimer, SimRun
from harness.records import RequestRecord, RequestSpec


def simulate_disaggregated(
    requests: Seq[RequestSpec],
    prefill: tuple[Seq[Engine], Seq[IterationTimer], int],
    decode: tuple[Seq[Engine], Seq[IterationTimer], int],
    transfers: Seq[Seq[KvTransfer]],
    routers: tuple[Router, Router],
    *,
    fast_forward: bool = True,
    time_limit_s: float | None = None,
    on_progress: Callable[[int], None] | None = None,
    stats: dict | None = None,
) -> list[RequestRecord]:
    """One record per request, input order. `prefill` and `decode` are (engines, timers, pp) of
    each role's instances; `transfers[p][d]` prices prefill instance p to decode instance d;
    `routers` = (prefill router, decode router). `stats`, if given, receives each role's
    `instance_requests` and the transfers' mean and max seconds (`kv_transfer_*_s`)."""
    limit = np.inf if time_limit_s is None else float(time_limit_s)
    (p_engines, p_timers, p_pp), (d_engines, d_timers, d_pp) = prefill, decode
    # Pass 1: prompts only; a request that wants one token ends here.
    prompts = [replace(r, output_len=1) for r in requests]
    p_run = SimRun(prompts, p_engines[0] if p_engines else None, None)  # type: ignore[arg-type]
    p_insts = make_instances(p_run, p_engines, p_timers, fast_forward, p_pp)
    served_by: list[int] = []  # prefill instance of each arrival rank (decisions come in rank order)
    route_and_run(p_insts, routers[0], ((a, rank) for rank, a in enumerate(p_run.arrivals.tolist())), limit,
                  lambda _states, k: served_by.append(k))
    firsts = p_run.records()
    if on_progress is not None:
        done = sum(1 for r, f in zip(requests, firsts) if r.output_len == 1 and f.completed)
        if done:
            on_progress(done)

    # Pass 2: each finished prompt with more to say moves to a decode instance.
    rank_of = {i: rank for rank, i in enumerate(p_run.order)}
    handoff = [i for i, (r, f) in enumerate(zip(requests, firsts)) if r.output_len > 1 and f.completed]
    rest = [RequestSpec(request_id=requests[i].request_id, arrival_s=firsts[i].first_token_s,
                        prompt_len=requests[i].prompt_len, output_len=requests[i].output_len) for i in handoff]
    d_run = SimRun(rest, d_engines[0] if d_engines else None, on_progress)  # type: ignore[arg-type]
    for seq in d_run.seqs:
        seq.arrive_prefilled()
    d_insts = make_instances(d_run, d_engines, d_timers, fast_forward, d_pp)
    link_free = np.zeros(len(p_engines))
    waits = np.zeros(len(rest))

    def place(rank: int, d: int) -> None:
        i = handoff[d_run.order[rank]]
        p = served_by[rank_of[i]]
        f = firsts[i]
        lands = transfers[p][d].arrival(requests[i].prompt_len, f.first_scheduled_s, f.first_token_s, link_free[p])
        link_free[p] = lands
        waits[rank] = lands - f.first_token_s
        d_run.arrivals[rank] = lands

    route_and_run(d_insts, routers[1], ((t, rank) for rank, t in enumerate(d_run.arrivals.tolist())), limit, place=place)
    seconds = d_run.records()
    if stats is not None:
        add_instance_stats(stats, p_insts, "prefill_")
        add_instance_stats(stats, d_insts, "decode_")
        stats["kv_transfer_mean_s"] = float(waits.mean()) if len(waits) else 0.0
        stats["kv_transfer_max_s"] = float(waits.max()) if len(waits) else 0.0
    out = []
    for spec, first in zip(requests, firsts):  # from its prefill alone: complete if it wanted one token, else cut off
        done = spec.output_len == 1 and first.completed
        out.append(replace(first, output_len=spec.output_len, finished_s=first.finished_s if done else float("nan"),
                           error=None if done else (first.error or "unfinished at time limit")))
    for i, rest in zip(handoff, seconds):  # the prefill's first token, then the decode instance's
        first = firsts[i]
        out[i] = replace(rest, arrival_s=requests[i].arrival_s, first_scheduled_s=first.first_scheduled_s,
                         first_token_s=first.first_token_s,
                         token_times_s=np.concatenate((first.token_times_s, rest.token_times_s)),
                         num_preemptions=first.num_preemptions + rest.num_preemptions)
    return out
