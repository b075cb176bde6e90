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
from harness.records import (EXTRA_OUTPUT, PROMPT_MISCOUNT, STOPPED_EARLY, WRONG_MODEL, RequestRecord, RequestSpec,
                             error_kind)

UNFINISHED = "unfinished at time limit"
NOT_SENT = "not sent before time limit"
ABORTED = "aborted: "  # + the reason the run was stopped
NO_USAGE = "the server sent no usage "  # a LoadResult note: + "for N of M requests: ..."


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
    stopped: str | None = None  # why the run stopped once its failure was certain (LoadOptions.max_error_fraction)
    without_usage: int = 0  # answered requests whose stream carried no usage: their counts went unchecked


def is_loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    return host == "localhost" or host.startswith("127.") or host == "::1"


def sse_events(x: Exchange) -> list[tuple[float, bytes]]:
    """The stream's SSE payloads, each with the time the read that completed it came off the socket."""
    split, events = SseSplitter(), []
    for t, piece in x.pieces:
        events.extend((t, data) for data in split.feed(piece))
    return events


NEVER_ENDED_S = 1.0  # a stream cut off this long after its last token, all of them received, never ended


def request_error(spec: RequestSpec, a, p, opts: LoadOptions, ended_at: float = math.inf) -> str | None:
    """What went wrong with one request, from the client's side (`a`, run.py's `_Attempt`), the
    wire (`a.x`) and its parsed stream `p`; None if nothing did. `ended_at`: when the run ended
    (a cut-off is the server's fault only if the stream had long been silent then)."""
    x: Exchange = a.x
    n = len(p.token_times)
    error = a.error or x.error or p.error
    if error is None and x.status != 200 and x.status:
        text = x.body.decode("utf-8", "replace")
        try:
            msg = json.loads(text)["error"]["message"]
        except (ValueError, KeyError, TypeError):
            msg = text.strip()[:200]
        error = f"HTTP {x.status}: {msg}"
    if math.isnan(a.dispatched):
        error = error or NOT_SENT
    if error == UNFINISHED or error_kind(error) == "timeout":
        # its end arrived as the run stopped (the cancel won the race): it ended
        ended = x.done is not None and x.done.done() and not x.done.cancelled() and x.error is None
        silent = not ended and bool(x.pieces) and ended_at - x.pieces[-1][0] > NEVER_ENDED_S
        if x.status == 200 and n >= spec.output_len and (error != UNFINISHED or silent):
            return f"stream did not end after its last token ({n} of {spec.output_len} received; then: {error})"
        return error
    if error is None and not (x.done is not None and x.done.done()):
        error = "stream ended early"
    if error is None and n > spec.output_len:
        error = f"{EXTRA_OUTPUT}received {n}, {spec.output_len} asked (finish_reason {p.finish_reason})"
    if error is None and n != spec.output_len:
        error = f"received {n} of {spec.output_len} tokens (finish_reason {p.finish_reason})"
    if error is None and p.prompt_tokens is not None and p.prompt_tokens != spec.prompt_len:
        error = f"{PROMPT_MISCOUNT}{p.prompt_tokens} tokens by the server, planned {spec.prompt_len}"
    if error is None and p.model is not None and p.model != opts.model:
        error = f"{WRONG_MODEL}answered as {p.model!r}, asked for {opts.model!r}"
    return error


def failed_at_a_glance(spec: RequestSpec, a, opts: LoadOptions) -> bool:
    """As a request ends, during the run: did it fail? Cheap enough for the event loop (its status,
    the client's error, the last two JSON events of its stream: the final usage chunk); `collect`
    judges every request fully after the run. True only for what `collect` records as a failure
    (a time limit's cut-off is none)."""
    x: Exchange = a.x
    if a.error is not None:
        return a.error != UNFINISHED
    if x.error is not None or x.status != 200:
        return True
    tail = b"".join(piece for _, piece in x.pieces[-4:])
    events = SseSplitter().feed(tail)
    if not tail.startswith(b"data:"):
        events = events[1:]  # the window began mid-event: its first is a fragment
    last = [e for e in events if e != b"[DONE]"][-2:]
    for k, data in enumerate(last, start=1 - len(last)):  # k == 0: the stream's last event
        try:
            obj = json.loads(data)
        except ValueError:
            return True
        if not isinstance(obj, dict) or "error" in obj:
            return True
        usage = obj.get("usage") or {}
        if usage.get("prompt_tokens", spec.prompt_len) != spec.prompt_len:
            return True
        if k == 0 and usage.get("completion_tokens", spec.output_len) != spec.output_len:
            return True
        if obj.get("model", opts.model) != opts.model:
            return True
    return False


def collect(requests: Sequence[RequestSpec], attempts: Sequence, t0: float, opts: LoadOptions, client: ClientLoad,
            aborted: str | None = None, stopped: str | None = None,
            stopped_listening: float = math.inf) -> LoadResult:
    """`attempts[i]` (run.py's `_Attempt`) holds planned and dispatch times, the client-side error
    and the `Exchange` of `requests[i]`. `stopped`: the run ended once its failure was certain, so
    what it cut off is marked STOPPED_EARLY (a cut-off, as a time limit's). `stopped_listening`: the
    clock's time the run stopped reading its streams (the end of their silence)."""
    same_clock = is_loopback(opts.base_url) if opts.same_clock is None else opts.same_clock
    records, sources, timings, events, without_usage = [], [], [], [], 0
    for spec, a in zip(requests, attempts):
        x: Exchange = a.x
        if not math.isnan(x.sent_at):
            a.dispatched = x.sent_at
        stream = sse_events(x) if x.status == 200 else []
        p = parse_stream(stream)
        without_usage += bool(stream) and not p.usage_sent
        times = np.asarray(p.token_times, dtype=np.float64) - t0
        error = request_error(spec, a, p, opts, stopped_listening)
        if aborted is not None and error in (UNFINISHED, NOT_SENT):
            error = ABORTED + aborted
        elif stopped is not None and error in (UNFINISHED, NOT_SENT):
            error = STOPPED_EARLY
        st = _server_timing(p.server_timing, a.dispatched, t0, same_clock)
        # Closed loop and sessions' later turns: planned when released; a turn never released keeps its session's start
        released = opts.concurrency is not None or (spec.after is not None and not math.isnan(a.planned))
        planned_s = a.planned - t0 if released else spec.arrival_s
        records.append(RequestRecord(
            request_id=spec.request_id, arrival_s=planned_s, prompt_len=spec.prompt_len, output_len=spec.output_len,
            first_scheduled_s=st.first_scheduled_s if st else math.nan,
            first_token_s=float(times[0]) if len(times) else math.nan,
            finished_s=float(times[-1]) if error is None and len(times) else math.nan, token_times_s=times,
            dispatched_s=a.dispatched - t0, num_preemptions=st.num_preemptions if st else 0, error=error,
            cached_tokens=p.cached_tokens or 0))
        sources.append(p.source)
        timings.append(st)
        events.append(p.num_events)
    lags = np.array([a.dispatched - a.planned for a in attempts], dtype=np.float64)  # NaN: never sent
    notes = []
    miscounted = sum(1 for r in records if r.error and r.error.startswith(PROMPT_MISCOUNT))
    if miscounted:
        notes.append(f"{miscounted} requests: the server counted a different prompt length than planned "
                     f"(recorded as errors of kind prompt_len)")
    if without_usage:
        notes.append(f"{NO_USAGE}for {without_usage} of {len(records)} requests: their prompt lengths and "
                     f"token counts are unchecked (vLLM and the in-repo server send it when asked, "
                     f"stream_options.include_usage)")
    verdict = judge_dispatch(lags, opts.lag, client)
    return LoadResult(records, lags, verdict, tuple(sources), tuple(timings), np.array(events), client.wall_s,
                      tuple(notes), aborted, client, stopped, without_usage)


def _server_timing(raw: dict | None, dispatched: float, t0: float, same_clock: bool) -> ServerTiming | None:
    if not raw or raw.get("arrival") is None:
        return None
    shift = -t0 if same_clock else (dispatched - t0) - raw["arrival"]

    def at(x) -> float:
        return math.nan if x is None else float(x) + shift

    return ServerTiming(arrival_s=at(raw["arrival"]), first_scheduled_s=at(raw.get("first_scheduled")),
                        token_times_s=np.asarray(raw.get("token_times") or [], dtype=np.float64) + shift,
                        finished_s=at(raw.get("finished")), num_preemptions=int(raw.get("num_preemptions") or 0))
