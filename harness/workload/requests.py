"""Pairing lengths with arrival offsets into the `RequestSpec`s the backends consume."""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from common.errors import HarnessError
from harness.records import RequestSpec

from .arrivals import arrival_offsets
from .lengths import Workload

# Arrival processes that cannot start sessions: a trace has its own requests' times, and a closed
# loop releases requests by finishes already.
NOT_FOR_SESSIONS = ("trace", "closed_loop")


def requests_at_rate(workload: Workload, arrival: Mapping, qps: float, seed: int) -> list[RequestSpec]:
    """A probe's requests at `qps`. Sessions start at qps x sessions / requests, so the request
    rate offered is `qps` (each session brings its turns); their later turns follow finishes."""
    sessions = workload.sessions
    if sessions is None:
        return make_requests(workload, arrival_offsets(arrival, qps, len(workload), seed))
    if arrival.get("name") in NOT_FOR_SESSIONS:
        raise HarnessError(f"arrival={arrival.get('name')} cannot start sessions (dataset.sessions): use an open-loop "
                           "process (poisson, gamma, constant); a session's turns follow its answers")
    count = sessions.num_sessions
    return make_requests(workload, arrival_offsets(arrival, qps * count / len(workload), count, seed))


def make_requests(workload: Workload, arrivals: np.ndarray) -> list[RequestSpec]:
    arrivals = np.asarray(arrivals, dtype=np.float64)
    sessions = workload.sessions
    expected = len(workload) if sessions is None else sessions.num_sessions
    if arrivals.ndim != 1 or arrivals.size != expected:
        what = "requests" if sessions is None else "sessions"
        raise HarnessError(f"{arrivals.size} arrival offsets for {expected} {what} ({workload.source})")
    if arrivals.size and (not np.all(np.isfinite(arrivals)) or arrivals[0] < 0 or np.any(np.diff(arrivals) < 0)):
        raise HarnessError("arrival offsets must be finite, >= 0 and nondecreasing")
    # Python ints and floats taken from the arrays at C speed (tolist); the fields passed in RequestSpec's order.
    prompts, outputs = _python(workload.prompt_lens, int), _python(workload.output_lens, int)
    if sessions is None:
        return [RequestSpec(i, t, p, o) for i, (t, p, o) in enumerate(zip(arrivals.tolist(), prompts, outputs))]
    # A later turn's arrival_s is its session's start (a lower bound); it is released by the finish
    # of the request before it (`after`), `think_s` later.
    start = arrivals[sessions.session].tolist()
    rows = zip(start, prompts, outputs, sessions.runs, _python(sessions.output_segment, int), sessions.turn.tolist(),
               _python(sessions.think_s, float))
    return [RequestSpec(i, t, p, o, None, None, runs, seg, i - 1 if turn else None, think)
            for i, (t, p, o, runs, seg, turn, think) in enumerate(rows)]


def _python(values, kind: type) -> list:
    """`values` as a list of Python `kind`s, as kind(v) would make each (numpy's tolist, at C speed)."""
    return np.asarray(values).astype(kind).tolist()
