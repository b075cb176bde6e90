"""Drive an OpenAI-compatible server with a list of `RequestSpec`s; one `RequestRecord` each.

Timing model. One monotonic clock (time.monotonic, CLOCK_MONOTONIC) for the whole run, 0 = run
start. Request i is planned at `start + arrival_s[i]` (absolute deadline, kept by a timer thread:
pacer.py); `dispatched_s` is when the request was written to its socket (when it never got that
far, when its coroutine began), so dispatch lag = dispatched - planned counts the client's own
queueing, waiting for a connection and connection set-up included. Every SSE event is
timestamped when its bytes come off the socket (one timestamp per read: events that arrived
together share it); a token's time is its event's time.
`finished_s` is the time of the last token (as in the simulator), NaN unless the request
completed.

`first_scheduled_s` comes from the server's `server_timing` extension (the in-repo server puts it
on a stream's final event). Servers without it (vLLM) give NaN: the client cannot see when a
request was first scheduled, only when its first token came back, so scheduling delay is then
unknown rather than guessed. On a loopback server the server's CLOCK_MONOTONIC is ours and its
times are used as they are; on another host they are shifted so that its arrival is our dispatch.

HTTP is http.py's: one keep-alive connection per in-flight request, as many independent users
would open, up to `max_connections`; past that a request waits for a connection, which shows as
its dispatch lag, and the verdict says the client's pool was full. A failed or timed-out request
is recorded with its error and the run goes on; with `time_limit_s`, requests still running or
never sent at the limit are recorded as unfinished (never dropped). collect.py turns what came
off the wire into records after the run.
"""
from __future__ import annotations

import asyncio
import dataclasses
import gc
import json
import math
import os
import sys
import time
from collections.abc import Sequence

from tqdm import tqdm

from harness.loadgen.collect import UNFINISHED, LoadResult, collect, failed_at_a_glance
from harness.loadgen.http import Exchange, Target
from harness.loadgen.options import LoadOptions
from harness.loadgen.pacer import Pacer, restore_priority, set_realtime_priority
from harness.loadgen.pool import ConnectionPool
from harness.loadgen.sessions import Sessions, generated_ids, has_sessions
from common.sse import SseSplitter
from harness.loadgen.validity import ClientLoad
from harness.records import RequestSpec

START_LEAD_S = 0.05  # the first deadline lies this far after setup, never in the past
# While a run is on, the pacer thread must get the GIL within well under a millisecond when its
# deadline comes; CPython's default switch interval (5 ms) would let the event loop's thread
# hold it that long.
SWITCH_INTERVAL_S = 0.0002


class _Attempt:
    __slots__ = ("dispatched", "error", "planned", "x")

    def __init__(self, request: bytes) -> None:
        self.planned = math.nan
        self.dispatched = math.nan  # when the request was written to its socket (see module docstring)
        self.x = Exchange(request)
        self.error: str | None = None  # the client's side: timeout, cut off, could not connect


API_PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}


def _body(spec: RequestSpec, opts: LoadOptions, continuous_usage: bool, user: str | None = None) -> bytes:
    """The JSON body of one request: the prompt as text when it has one, else as token ids
    (completions only: a chat message is text); a session's turn names its session as `user`
    (OpenAI's end-user id: what a session-affine router hashes)."""
    if spec.prompt_text is None and (opts.api == "chat" or spec.prompt_token_ids is None):
        raise ValueError(f"request {spec.request_id} has no prompt_text"
                         + ("" if opts.api == "chat" else " nor prompt_token_ids (with_prompt_token_ids fills them)"))
    body: dict = {"model": opts.model}
    if opts.api == "chat":
        body["messages"] = [{"role": "user", "content": spec.prompt_text}]
    else:
        body["prompt"] = spec.prompt_text if spec.prompt_text is not None else list(spec.prompt_token_ids)
    body.update({
        "max_tokens": spec.output_len,
        "ignore_eos": opts.ignore_eos,
        "temperature": opts.temperature,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": continuous_usage},
        **dict(opts.extra_body),
    })
    if user is not None:
        body["user"] = user
    return json.dumps(body, separators=(",", ":")).encode()


def auth_headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


async def _continuous_usage_needed(pool: ConnectionPool, target: Target, first: RequestSpec | None,
                                   opts: LoadOptions, headers: dict[str, str]) -> bool:
    """Before the clock starts: one short stream through the pool (it also warms the client's code
    paths and opens a connection). Usage on every event is needed unless the server names each
    event's tokens itself (`token_ids`, as the in-repo server does): it costs the server and the
    client about a tenth of their time per event."""
    if opts.continuous_usage is not None or first is None:
        return opts.continuous_usage is not False
    # Four prompt tokens (words): less than a KV block, so no prefix cache keeps any of request 0.
    ids = first.prompt_token_ids
    text = first.prompt_text
    probe = dataclasses.replace(first, output_len=2, prompt_token_ids=ids[:4] if ids else ids,
                                prompt_text=" ".join(text.split(" ")[:4]) if text else text)
    x = Exchange(target.request("POST", API_PATHS[opts.api], _body(probe, opts, True), headers))
    try:
        await _exchange_unless_stalled(pool, x, opts.connect_timeout_s + 10, opts.stall_timeout_s)
    except (ConnectionError, TimeoutError):
        return True  # the run itself will record what is wrong with the server
    if x.status != 200 or x.error:
        return True
    try:
        chunks = [json.loads(e) for e in SseSplitter().feed(x.body) if e != b"[DONE]"]
        with_text = [c["choices"][0] for c in chunks if isinstance(c, dict) and c.get("choices")]
    except (ValueError, TypeError, IndexError, KeyError):
        return True  # not a stream we understand: the run will say what is wrong with it
    return not with_text or any(c.get("token_ids") is None for c in with_text)


def _stalled(x: Exchange, now: float, stall_s: float | None) -> bool:
    """Silent for more than `stall_s` after its first bytes (None: never stalled)."""
    return stall_s is not None and bool(x.pieces) and now - x.pieces[-1][0] > stall_s


async def _exchange_unless_stalled(pool: ConnectionPool, x: Exchange, timeout_s: float, stall_s: float | None) -> None:
    """pool.exchange(x) within `timeout_s`, and (as the run's own watch does) no longer than
    `stall_s` of silence after its first bytes: TimeoutError either way. A stream that never ends
    would otherwise hold every probe's start for the whole timeout."""
    task = asyncio.ensure_future(pool.exchange(x))
    deadline = pool.clock() + timeout_s
    poll = min(0.25, stall_s / 4) if stall_s is not None else timeout_s
    try:
        while not task.done():
            await asyncio.wait({task}, timeout=poll)
            now = pool.clock()
            if not task.done() and (now >= deadline or _stalled(x, now, stall_s)):
                raise TimeoutError
        task.result()
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def run_load(requests: Sequence[RequestSpec], opts: LoadOptions) -> LoadResult:
    """Blocking wrapper around `run_load_async`, in its own event loop: uvloop's where installed
    (its reads cost about a fifth less CPU than asyncio's selector loop; bench_loadgen.py)."""
    try:
        import uvloop
        factory = uvloop.new_event_loop
    except ImportError:
        factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(run_load_async(requests, opts))


async def run_load_async(requests: Sequence[RequestSpec], opts: LoadOptions) -> LoadResult:
    n = len(requests)
    target = Target.parse(opts.base_url)
    headers = {"Content-Type": "application/json", **auth_headers(opts.api_key)}
    clock = time.monotonic
    loop = asyncio.get_running_loop()
    pool = ConnectionPool(target, opts.max_connections, opts.connect_timeout_s, clock)
    continuous = await _continuous_usage_needed(pool, target, requests[0] if n else None, opts, headers)
    # Serialized before the clock starts: sending is one write.
    path = API_PATHS[opts.api]
    sessions = Sessions(requests) if has_sessions(requests) else None
    # A session's later turn is built when it is released (sessions.py): a placeholder until then.
    users = sessions.users if sessions is not None else [None] * n
    attempts = [_Attempt(target.request("POST", path, _body(r, opts, continuous, u), headers) if r.after is None else b"")
                for r, u in zip(requests, users)]
    timers: list[asyncio.TimerHandle] = []
    if opts.concurrency is None:
        await pool.prewarm()  # open-loop: idle connections ready for the pacer's direct sends
    bar = tqdm(total=n, desc=opts.progress_desc, unit="req", disable=not opts.progress, file=sys.stderr,
               leave=False, mininterval=0.5)
    tasks: dict[asyncio.Task, int] = {}  # in flight: task -> request index
    all_done = asyncio.Event()
    left = [n]
    aborted: list[str | None] = [None]
    stopped: list[str | None] = [None]  # why the run stopped once its failure was certain
    failed = [0]

    async def watch() -> None:
        """Stops the run when the caller says the server is gone; cuts streams silent for too long."""
        stall = opts.stall_timeout_s
        while not all_done.is_set():
            await asyncio.sleep(opts.abort_poll_s)
            reason = opts.abort_check() if opts.abort_check is not None else None
            if reason:
                aborted[0] = reason
                all_done.set()
            if stall is not None:
                now = clock()
                for task, i in list(tasks.items()):
                    a = attempts[i]
                    if _stalled(a.x, now, stall) and a.error is None:
                        a.error = f"stalled: no bytes for {stall:g} s mid-stream"
                        task.cancel()
    if n == 0:
        all_done.set()

    async def send(i: int, conn=None) -> None:
        """Request i, from its dispatch to its last byte; `conn`: the pacer thread already wrote it there."""
        a = attempts[i]
        a.dispatched = clock()  # replaced by the time the request is written (x.sent_at), if it is
        try:
            async with asyncio.timeout(opts.request_timeout_s):
                if conn is None:
                    await pool.exchange(a.x)
                else:
                    await pool.follow(conn, a.x)
        except TimeoutError:
            a.error = f"timed out after {opts.request_timeout_s:g} s"
        except ConnectionError as e:
            a.error = str(e)
        except asyncio.CancelledError:
            a.error = a.error or UNFINISHED  # a stall (watch) names itself
            raise

    def on_done(task: asyncio.Task) -> None:
        i = tasks.pop(task)
        left[0] -= 1
        bar.update(1)
        if opts.max_errors is not None and stopped[0] is None and failed_at_a_glance(requests[i], attempts[i], opts):
            failed[0] += 1
            if failed[0] > opts.max_errors:  # the probe fails whatever the rest does: stop sending
                stopped[0] = (f"{failed[0]} of {n} requests failed by request {i}, more than the "
                              f"{opts.max_errors} allowed")
                all_done.set()
        if next_closed is not None and stopped[0] is None:
            next_closed()
        if sessions is not None and sessions.successor[i] is not None and not all_done.is_set():
            release_after(i)
        if left[0] == 0:
            all_done.set()

    def release_after(i: int) -> None:
        """Request i's response ended: its session's next turn goes think_s later, or, if i failed,
        none of the turns after it (never sent; no longer awaited)."""
        a, j = attempts[i], sessions.successor[i]
        if a.error or a.x.error or a.x.status != 200:
            skipped = sessions.chain_after(i)
            left[0] -= len(skipped)
            bar.update(len(skipped))
            return
        spec = requests[j]
        ids = opts.session_prompt(spec, generated_ids(a.x.body))
        body = _body(dataclasses.replace(spec, prompt_token_ids=ids), opts, continuous, sessions.users[j])
        attempts[j] = _Attempt(target.request("POST", path, body, headers))
        attempts[j].planned = clock() + spec.think_s
        timers.append(loop.call_later(spec.think_s, launch, j))

    def launch(i: int, conn=None) -> None:
        task = loop.create_task(send(i, conn))
        tasks[task] = i
        task.add_done_callback(on_done)

    def fire(items: list[tuple[int, object]]) -> None:
        for i, conn in items:
            launch(i, conn)

    old_switch = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    # A full garbage collection holds the GIL for tens of ms on a harness-sized heap, stalling the
    # pacer and the loop alike; freezing what exists now leaves only the run's own young objects.
    gc.collect()
    gc.freeze()
    old_priority = set_realtime_priority() if opts.realtime_priority is not False else None
    realtime = old_priority is not None
    pacer = None
    next_closed = None
    cpu0 = time.process_time()
    t0 = clock() + START_LEAD_S
    if opts.concurrency is None:
        paced = sessions.paced if sessions is not None else range(n)
        order = sorted(paced, key=lambda i: (requests[i].arrival_s, i))
        for i in order:
            attempts[i].planned = t0 + requests[i].arrival_s
        pacer = Pacer(loop, [attempts[i].planned for i in order],
                      lambda items: fire([(order[k], conn) for k, conn in items]),
                      realtime=realtime, direct=lambda k: pool.send_direct(attempts[order[k]].x))
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
    watched = opts.abort_check is not None or opts.stall_timeout_s is not None
    watchdog = loop.create_task(watch()) if watched else None
    try:
        limit = None if opts.time_limit_s is None else max(0.0, t0 + opts.time_limit_s - clock())
        try:
            await asyncio.wait_for(all_done.wait(), timeout=limit)
        except TimeoutError:
            pass
    finally:
        all_done.set()  # from here on a cancelled turn releases nothing
        if watchdog is not None:
            watchdog.cancel()
        next_closed = None
        for timer in timers:
            timer.cancel()
        if pacer is not None:
            pacer.stop()
            await asyncio.sleep(0)  # hand-offs the pacer queued before it stopped become tasks, cancelled below
        for task in list(tasks):
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        pool.close()
        sys.setswitchinterval(old_switch)
        gc.unfreeze()
        restore_priority(old_priority)
        bar.close()
    wall = clock() - t0
    client = ClientLoad(time.process_time() - cpu0, wall, pool.limit, pool.peak_open, pool.waited, continuous,
                        pool.direct_sends, realtime, pacer.wake_lag(opts.lag.quantile) if pacer else math.nan,
                        os.getloadavg()[0])
    result = collect(requests, attempts, t0, opts, client, aborted[0], stopped[0])
    if opts.realtime_priority and not realtime:
        result = dataclasses.replace(result, notes=(*result.notes, "realtime priority was asked for (SCHED_FIFO) but "
                                                    "is not permitted here: the client ran at normal priority"))
    return result
