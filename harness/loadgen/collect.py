"""After a run: from what came off the wire (each request's `Exchange`) to `RequestRecord`s, the
server's own timings, and the verdict on the client's own pace. Nothing here runs while the
clock is on."""
from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import numpy as np

from harness.loadgen.http import Exchange
from harness.loadgen.options import LoadOptions
from common.sse import SseSplitter
from harness.loadgen.tokens import parse_stream
from harness.loadgen.validity import ClientLoad, DispatchVerdict, judge_dispatch
from harness.records import PROMPT_MISCOUNT, RequestRecord, RequestSpec

UNFINISHED = "unfinished at time limit"
NOT_SENT = "not sent before time limit"
ABORTED = "aborted: "  # + the reason the run was stopped


@dataclass(frozen=True)
class ServerTiming:
    """The server's own view of one request, on the run's clock (see run.py's docstring)."""

    arrival_s: float
    first_scheduled_s: float
    token_times_s: np.ndarray = field(repr=False)
    finished_s: float
    num_preemptions: int


@dataclass(frozen=True)
class LoadResult:
    records: list[RequestRecord]
    dispatch_lag_s: np.ndarray  # NaN for requests never sent
    verdict: DispatchVerdict
    token_sources: tuple[str, ...]  # per request: continuous_usage | token_ids | events | none
    server_timings: tuple[ServerTiming | None, ...]
    num_events: np.ndarray
    wall_s: float
    notes: tuple[str, ...] = ()
    aborted: str | None = None  # why the run was stopped early (LoadOptions.abort_check), if it was
    client: ClientLoad | None = None  # what the run cost the client itself


def is_loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    return host == "localhost" or host.startswith("127.") or host == "::1"


def error_message(status: int, text: str) -> str:
    try:
        msg = json.loads(text)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        msg = text.strip()[:200]
    return f"HTTP {status}: {msg}"


def sse_events(x: Exchange) -> list[tuple[float, bytes]]:
    """The stream's SSE payloads, each with the time the read that completed it came off the socket."""
    split, events = SseSplitter(), []
    for t, piece in x.pieces:
        events.extend((t, data) for data in split.feed(piece))
    return events


def collect(requests: Sequence[RequestSpec], attempts: Sequence, t0: float, opts: LoadOptions, client: ClientLoad,
            aborted: str | None = None) -> LoadResult:
    """`attempts[i]` (run.py's `_Attempt`) holds planned and dispatch times, the client-side error
    and the `Exchange` of `requests[i]`."""
    same_clock = is_loopback(opts.base_url) if opts.same_clock is None else opts.same_clock
    records, sources, timings, events = [], [], [], []
    for spec, a in zip(requests, attempts):
        x: Exchange = a.x
        if not math.isnan(x.sent_at):
            a.dispatched = x.sent_at
        stream = sse_events(x) if x.status == 200 else []
        p = parse_stream(stream)
        times = np.asarray(p.token_times, dtype=np.float64) - t0
        error = a.error or x.error or p.error
        if error is None and x.status != 200 and x.status:
            error = error_message(x.status, x.body.decode("utf-8", "replace"))
        if math.isnan(a.dispatched):
            error = error or NOT_SENT
        if error is None and not (x.done is not None and x.done.done()):
            error = "stream ended early"
        if error is None and len(times) != spec.output_len:
            error = f"received {len(times)} of {spec.output_len} tokens (finish_reason {p.finish_reason})"
        if error is None and p.prompt_tokens is not None and p.prompt_tokens != spec.prompt_len:
            error = f"{PROMPT_MISCOUNT}{p.prompt_tokens} tokens by the server, planned {spec.prompt_len}"
        if aborted is not None and error in (UNFINISHED, NOT_SENT):
            error = ABORTED + aborted
        st = _server_timing(p.server_timing, a.dispatched, t0, same_clock)
        planned_s = a.planned - t0 if opts.concurrency is not None else spec.arrival_s
        records.append(RequestRecord(
            request_id=spec.request_id,
            arrival_s=planned_s,
            prompt_len=spec.prompt_len,
            output_len=spec.output_len,
            first_scheduled_s=st.first_scheduled_s if st else math.nan,
            first_token_s=float(times[0]) if len(times) else math.nan,
            finished_s=float(times[-1]) if error is None and len(times) else math.nan,
            token_times_s=times,
            dispatched_s=a.dispatched - t0,
            num_preemptions=st.num_preemptions if st else 0,
            error=error,
        ))
        sources.append(p.source)
        timings.append(st)
        events.append(p.num_events)
    lags = np.array([a.dispatched - a.planned for a in attempts], dtype=np.float64)
    notes = []
    miscounted = sum(1 for r in records if r.error and r.error.startswith(PROMPT_MISCOUNT))
    if miscounted:
        notes.append(f"{miscounted} requests: the server counted a different prompt length than planned "
                     f"(recorded as errors of kind prompt_len)")
    verdict = judge_dispatch(lags, opts.lag, client)
    return LoadResult(records, lags, verdict, tuple(sources), tuple(timings), np.array(events), client.wall_s,
                      tuple(notes), aborted, client)


def _server_timing(raw: dict | None, dispatched: float, t0: float, same_clock: bool) -> ServerTiming | None:
    if not raw or raw.get("arrival") is None:
        return None
    shift = -t0 if same_clock else (dispatched - t0) - raw["arrival"]

    def at(x) -> float:
        return math.nan if x is None else float(x) + shift

    return ServerTiming(
        arrival_s=at(raw["arrival"]),
        first_scheduled_s=at(raw.get("first_scheduled")),
        token_times_s=np.asarray(raw.get("token_times") or [], dtype=np.float64) + shift,
        finished_s=at(raw.get("finished")),
        num_preemptions=int(raw.get("num_preemptions") or 0),
    )
