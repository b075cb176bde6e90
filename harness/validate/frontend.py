"""When the client sees a token: the engine's step end, then its API server's output processing.

vLLM's API server runs one `AsyncLLM.output_handler` task (v1/engine/async_llm.py) over the engine
core's outputs, step after step: `OutputProcessor.process_outputs` detokenizes each request's new
token and queues it for the request's stream before the next step's outputs are taken. So a step's
tokens are delivered `FrontendCosts.time(n)` after the step ends (n: the requests with a token in
it), and not before the previous step's were (a single server, in order). The simulator's token
times are the steps' ends; `deliver` turns them into delivery times (engines/perf/cpu_costs.py
names what is measured and where).
"""
from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence

import numpy as np

from engines.perf.cpu_costs import FrontendCosts
from harness.records import RequestRecord


def delivery_times(step_ends: Counter, costs: FrontendCosts) -> dict[float, float]:
    """Each step end (with its count of tokens) -> when the API server has its outputs queued."""
    out: dict[float, float] = {}
    free = -np.inf
    for end in sorted(step_ends):
        free = max(end, free) + costs.time(step_ends[end])
        out[end] = free
    return out


def deliver(records: Sequence[RequestRecord], costs: FrontendCosts) -> list[RequestRecord]:
    """`records` with every token at its delivery time. Tokens of one step share its end exactly
    (the simulator stamps a step's tokens with one time), which is how they are counted together."""
    ends = Counter(float(t) for r in records for t in r.token_times_s if np.isfinite(t))
    when = delivery_times(ends, costs)
    out = []
    for r in records:
        if len(r.token_times_s) == 0:
            out.append(r)
            continue
        times = np.array([when[float(t)] if np.isfinite(t) else float(t) for t in r.token_times_s])
        out.append(dataclasses.replace(r, token_times_s=times, first_token_s=float(times[0]),
                                       finished_s=float(times[-1]) if np.isfinite(r.finished_s) else r.finished_s))
    return out
