"""Drive an OpenAI-compatible server with a list of `RequestSpec`s; one `RequestRecord` each.

Timing model. One monotonic clock (time.monotonic, CLOCK_MONOTONIC) for the whole run, 0 = run
start. Request i is planned at `start + arrival_s[i]` (absolute deadline, kept by a timer thread:
pacer.py); `dispatched_s` is when the request's head was written to its socket (aiohttp's
`on_request_headers_sent` trace hook; when it never got that far, when its coroutine began), so
dispatch lag = dispatched - planned counts the client's own queueing, connection set-up included. Every SSE event is timestamped when its bytes come off the socket (one
timestamp per read: events that arrived together share it); a token's time is its event's time.
`finished_s` is the time of the last token (as in the simulator), NaN unless the request
completed.

`first_scheduled_s` comes from the server's `server_timing` extension (the in-repo server puts it
on a stream's final event). Servers without it (vLLM) give NaN: the client cannot see when a
request was first scheduled, only when its first token came back, so scheduling delay is then
unknown rather than guessed. On a loopback server the server's CLOCK_MONOTONIC is ours and its
times are used as they are; on another host they are shifted so that its arrival is our dispatch.

One shared aiohttp session, no connection limit (a connection per in-flight request, as many
independent users would open), large read buffer. A failed or timed-out request is recorded
with its error and the run goes on; with `time_limit_s`, requests still running or never sent
at the limit are recorded as unfinished (never dropped).
"""
from __future__ import annotations

import asyncio
import gc
import json
import math
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import aiohttp
import numpy as np
from tqdm import tqdm

from harness.loadgen.options import LoadOptions
from harness.loadgen.pacer import Pacer, restore_priority, set_realtime_priority
from harness.loadgen.sse import SseSplitter
from harness.loadgen.tokens import parse_stream
from harness.loadgen.validity import DispatchVerdict, judge_dispatch
from harness.records import RequestRecord, RequestSpec

UNFINISHED = "unfinished at time limit"
NOT_SENT = "not sent before time limit"
ABORTED = "aborted: "  # + the reason the run was stopped
START_LEAD_S = 0.05  # the first deadline lies this far after setup, never in the past
# While a run is on, the pacer thread must get the GIL within well under a millisecond when its
# deadline comes; CPython's default switch interval (5 ms) would let the event loop's thread
# hold it that long.
SWITCH_INTERVAL_S = 0.0002


@dataclass(frozen=True)
class ServerTiming:
    """The server's own view of one request, on the run's clock (see module docstring)."""

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


class _Attempt:
    __slots__ = ("planned", "dispatched", "events", "complete", "error")

    def __init__(self) -> None:
        self.planned = math.nan
        self.dispatched = math.nan
        self.events: list[tuple[float, bytes]] = []
        self.complete = False
        self.error: str | None = None


def _is_loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    return host == "localhost" or host.startswith("127.") or host == "::1"


def _payload(spec: RequestSpec, opts: LoadOptions) -> bytes:
    if spec.prompt_token_ids is None:
        raise ValueError(f"request {spec.request_id} has no prompt_token_ids (fill them with with_prompt_token_ids)")
    body = {
        "model": opts.model,
        "prompt": list(spec.prompt_token_ids),
        "max_tokens": spec.output_len,
        "ignore_eos": opts.ignore_eos,
        "temperature": opts.temperature,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": opts.continuous_usage},
        **dict(opts.extra_body),
    }
    return json.dumps(body, separators=(",", ":")).encode()


def auth_headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _error_message(status: int, text: str) -> str:
    try:
        msg = json.loads(text)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        msg = text.strip()[:200]
    return f"HTTP {status}: {msg}"


async def _warm(session: aiohttp.ClientSession, base_url: str) -> None:
    """One request through the session before the clock starts: aiohttp initialises lazily, and
    the first request of a session would otherwise carry milliseconds of dispatch lag."""
    try:
        async with session.get(base_url.rstrip("/") + "/health") as r:
            await r.read()
    except (aiohttp.ClientError, TimeoutError):
        pass  # the run itself will record what is wrong with the server


def run_load(requests: Sequence[RequestSpec], opts: LoadOptions) -> LoadResult:
    """Blocking wrapper around `run_load_async` (its own event loop)."""
    return asyncio.run(run_load_async(requests, opts))


async def run_load_async(requests: Sequence[RequestSpec], opts: LoadOptions) -> LoadResult:
    n = len(requests)
    payloads = [_payload(r, opts) for r in requests]  # serialized before the clock starts
    attempts = [_Attempt() for _ in range(n)]
    url = opts.base_url.rstrip("/") + "/v1/completions"
    headers = {"Content-Type": "application/json", **auth_headers(opts.api_key)}
    clock = time.monotonic
    loop = asyncio.get_running_loop()
    timeout = aiohttp.ClientTimeout(total=opts.request_timeout_s, sock_connect=opts.connect_timeout_s)
    connector = aiohttp.TCPConnector(limit=0)
    bar = tqdm(total=n, desc=opts.progress_desc, unit="req", disable=not opts.progress, file=sys.stderr,
               leave=False, mininterval=0.5)
    tasks: set[asyncio.Task] = set()
    all_done = asyncio.Event()
    left = [n]
    aborted: list[str | None] = [None]

    async def watch() -> None:  # stops the run when the caller says the server is gone
        while not all_done.is_set():
            await asyncio.sleep(opts.abort_poll_s)
            reason = opts.abort_check()
            if reason:
                aborted[0] = reason
                all_done.set()
    if n == 0:
        all_done.set()

    async def send(i: int) -> None:
        a = attempts[i]
        a.dispatched = clock()  # replaced by the time the head leaves (on_sent), if it does
        try:
            async with session.post(url, data=payloads[i], headers=headers, trace_request_ctx=a) as resp:
                if resp.status != 200:
                    a.error = _error_message(resp.status, await resp.text())
                    return
                split, events = SseSplitter(), a.events
                async for chunk in resp.content.iter_any():
                    t = clock()
                    for data in split.feed(chunk):
                        events.append((t, data))
                a.complete = True
        except TimeoutError:
            a.error = f"timed out after {opts.request_timeout_s:g} s"
        except aiohttp.ClientError as e:
            a.error = f"{type(e).__name__}: {e}"
        except asyncio.CancelledError:
            a.error = UNFINISHED
            raise

    def on_done(task: asyncio.Task) -> None:
        tasks.discard(task)
        left[0] -= 1
        bar.update(1)
        if next_closed is not None:
            next_closed()
        if left[0] == 0:
            all_done.set()

    def launch(i: int) -> None:
        task = loop.create_task(send(i))
        tasks.add(task)
        task.add_done_callback(on_done)

    def fire(indices: list[int]) -> None:
        for i in indices:
            launch(i)

    old_switch = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    # A full garbage collection holds the GIL for tens of ms on a harness-sized heap, stalling the
    # pacer and the loop alike; freezing what exists now leaves only the run's own young objects.
    gc.collect()
    gc.freeze()
    old_priority = None
    if opts.realtime_priority:
        old_priority = set_realtime_priority()
        if old_priority is None:
            warnings.warn("realtime_priority: SCHED_FIFO not permitted here; running at normal priority", stacklevel=2)
    pacer = None
    next_closed = None
    async def on_sent(session, ctx, params) -> None:  # the request's head is on the socket
        if isinstance(ctx.trace_request_ctx, _Attempt):  # not the warm-up request
            ctx.trace_request_ctx.dispatched = clock()

    tracing = aiohttp.TraceConfig()
    tracing.on_request_headers_sent.append(on_sent)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, read_bufsize=opts.read_bufsize,
                                     trace_configs=[tracing]) as session:
        await _warm(session, opts.base_url)  # /health: open without a key
        t0 = clock() + START_LEAD_S
        if opts.concurrency is None:
            order = sorted(range(n), key=lambda i: (requests[i].arrival_s, i))
            for i in order:
                attempts[i].planned = t0 + requests[i].arrival_s
            pacer = Pacer(loop, [attempts[i].planned for i in order], lambda idx: fire([order[k] for k in idx]),
                          realtime=opts.realtime_priority)
            pacer.start()
        else:
            # Closed loop: a request is "planned" when a slot frees up; arrival times are ignored.
            queue = iter(range(n))

            def next_closed() -> None:
                i = next(queue, None)
                if i is not None:
                    attempts[i].planned = clock()
                    launch(i)

            await asyncio.sleep(max(0.0, t0 - clock()))
            for _ in range(min(opts.concurrency, n)):
                next_closed()
        watchdog = loop.create_task(watch()) if opts.abort_check is not None else None
        try:
            limit = None if opts.time_limit_s is None else max(0.0, t0 + opts.time_limit_s - clock())
            try:
                await asyncio.wait_for(all_done.wait(), timeout=limit)
            except TimeoutError:
                pass
        finally:
            if watchdog is not None:
                watchdog.cancel()
            next_closed = None
            if pacer is not None:
                pacer.stop()
            for task in list(tasks):
                task.cancel()
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
            sys.setswitchinterval(old_switch)
            gc.unfreeze()
            restore_priority(old_priority)
            bar.close()
    wall = clock() - t0
    return _result(requests, attempts, t0, wall, opts, aborted[0])


def _result(requests: Sequence[RequestSpec], attempts: list[_Attempt], t0: float, wall: float,
            opts: LoadOptions, aborted: str | None = None) -> LoadResult:
    same_clock = _is_loopback(opts.base_url) if opts.same_clock is None else opts.same_clock
    records, sources, timings, events = [], [], [], []
    prompt_mismatch = 0
    for spec, a in zip(requests, attempts):
        p = parse_stream(a.events)
        times = np.asarray(p.token_times, dtype=np.float64) - t0
        error = a.error or p.error
        if math.isnan(a.dispatched):
            error = error or NOT_SENT
        if error is None and not a.complete:
            error = "stream ended early"
        if error is None and len(times) != spec.output_len:
            error = f"received {len(times)} of {spec.output_len} tokens (finish_reason {p.finish_reason})"
        if aborted is not None and error in (UNFINISHED, NOT_SENT):
            error = ABORTED + aborted
        if p.prompt_tokens is not None and p.prompt_tokens != spec.prompt_len:
            prompt_mismatch += 1
        st = _server_timing(p.server_timing, a, t0, same_clock)
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
    if prompt_mismatch:
        notes.append(f"{prompt_mismatch} requests: server counted a different prompt length than sent")
    verdict = judge_dispatch(lags, opts.lag)
    return LoadResult(records, lags, verdict, tuple(sources), tuple(timings), np.array(events), wall, tuple(notes),
                      aborted)


def _server_timing(raw: dict | None, a: _Attempt, t0: float, same_clock: bool) -> ServerTiming | None:
    if not raw or raw.get("arrival") is None:
        return None
    shift = -t0 if same_clock else (a.dispatched - t0) - raw["arrival"]

    def at(x) -> float:
        return math.nan if x is None else float(x) + shift

    return ServerTiming(
        arrival_s=at(raw["arrival"]),
        first_scheduled_s=at(raw.get("first_scheduled")),
        token_times_s=np.asarray(raw.get("token_times") or [], dtype=np.float64) + shift,
        finished_s=at(raw.get("finished")),
        num_preemptions=int(raw.get("num_preemptions") or 0),
    )
