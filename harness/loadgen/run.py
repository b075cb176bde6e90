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
from collections.abc import Iterator, Sequence

from tqdm import tqdm

from harness.loadgen.collect import UNFINISHED, LoadResult, collect, failed_at_a_glance
from harness.loadgen.http import Exchange, Target
from harness.loadgen.options import LoadOptions
from harness.loadgen.pacer import Pacer, restore_priority, set_realtime_priority
from harness.loadgen.pool import ConnectionPool
from harness.loadgen.sessions import Sessions, generated_ids
from common.sse import SseSplitter
from harness.loadgen.validity import ClientLoad
from harness.records import RequestSpec
from harness.settings.load import API_PATHS

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


def _body(spec: RequestSpec, opts: LoadOptions, continuous_usage: bool, user: str | None = None) -> bytes:
    """The JSON body of one request: the prompt as text when it has one, else as token ids
    (completions only: a chat message is text); a session's turn names its session as `user`
    (OpenAI's end-user id: what a session-affine router hashes)."""
    if spec.prompt_text is None and (opts.api == "chat" or spec.prompt_token_ids is None):
        raise ValueError(f"request {spec.request_id} has no prompt_text"
                         + ("" if opts.api == "chat" else " nor prompt_token_ids (with_prompt_token_ids fills them)"))
    prompt = spec.prompt_text if spec.prompt_text is not None else list(spec.prompt_token_ids)
    body = {"model": opts.model, **prompt_fields(opts.api, prompt), "max_tokens": spec.output_len,
            "ignore_eos": opts.ignore_eos, "temperature": opts.temperature, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": continuous_usage},
            **dict(opts.extra_body)}
    if user is not None:
        body["user"] = user
    return json.dumps(body, separators=(",", ":")).encode()


def prompt_fields(api: str, prompt: str | list[int]) -> dict:
    """A request body's prompt: a chat message (text only), or a completion's text or token ids."""
    return {"messages": [{"role": "user", "content": prompt}]} if api == "chat" else {"prompt": prompt}


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
    target = Target.parse(opts.base_url)
    headers = {"Content-Type": "application/json", **auth_headers(opts.api_key)}
    clock = time.monotonic
    pool = ConnectionPool(target, opts.max_connections, opts.connect_timeout_s, clock)
    continuous = await _continuous_usage_needed(pool, target, requests[0] if len(requests) else None, opts, headers)
    return await _LoadRun(requests, opts, target, headers, pool, continuous, clock).drive()


class _LoadRun:
    """One run, from its first send to its result: the requests' attempts, the tasks in flight,
    how many requests are still awaited, and why the run ended early if it did. Its state changes
    on the event loop's thread only (the pacer thread writes a due request to its socket, then
    hands it over with call_soon_threadsafe), so the counters need no lock."""

    def __init__(self, requests: Sequence[RequestSpec], opts: LoadOptions, target: Target, headers: dict[str, str],
                 pool: ConnectionPool, continuous: bool, clock) -> None:
        self.requests, self.opts, self.target, self.headers = requests, opts, target, headers
        self.pool, self.continuous, self.clock = pool, continuous, clock
        self.loop = asyncio.get_running_loop()
        self.n = n = len(requests)
        # Serialized before the clock starts: sending is one write.
        self.path = API_PATHS[opts.api]
        self.sessions = Sessions(requests) if any(r.after is not None for r in requests) else None
        # A session's later turn is built when it is released (sessions.py): a placeholder until then.
        users = self.sessions.users if self.sessions is not None else [None] * n
        self.attempts = [_Attempt(target.request("POST", self.path, _body(r, opts, continuous, u), headers)
                                  if r.after is None else b"") for r, u in zip(requests, users)]
        self.timers: list[asyncio.TimerHandle] = []  # sessions' later turns, waiting out their think time
        self.tasks: dict[asyncio.Task, int] = {}  # in flight: task -> request index
        self.all_done = asyncio.Event()
        self.left = n  # requests neither ended nor skipped (a failed turn's successors are skipped)
        self.aborted: str | None = None  # the caller's reason the server is gone (opts.abort_check)
        self.stopped: str | None = None  # why the run stopped once its failure was certain
        self.failed = 0  # requests failed at a glance
        frac = opts.max_error_fraction
        self.max_errors = None if frac is None or frac >= 1 else math.floor(frac * n)  # more fail the probe
        self.limit_s = opts.time_limit_s  # the time limit, or the last planned arrival + drain_s
        if self.limit_s is None and opts.drain_s is not None and n and opts.concurrency is None:
            self.limit_s = max(r.arrival_s for r in requests) + opts.drain_s
        # Closed loop: the requests not yet sent; None in open loop, and once the run is over.
        self.queue: Iterator[int] | None = None
        self.bar: tqdm | None = None
        if n == 0:
            self.all_done.set()

    async def watch(self) -> None:
        """Stops the run when the caller says the server is gone; cuts streams silent for too long."""
        opts = self.opts
        stall = opts.stall_timeout_s
        while not self.all_done.is_set():
            await asyncio.sleep(opts.abort_poll_s)
            reason = opts.abort_check() if opts.abort_check is not None else None
            if reason:
                self.aborted = reason
                self.all_done.set()
            if stall is not None:
                now = self.clock()
                for task, i in list(self.tasks.items()):
                    a = self.attempts[i]
                    if _stalled(a.x, now, stall) and a.error is None:
                        a.error = f"stalled: no bytes for {stall:g} s mid-stream"
                        task.cancel()

    async def send(self, i: int, conn=None) -> None:
        """Request i, from its dispatch to its last byte; `conn`: the pacer thread already wrote it there."""
        a = self.attempts[i]
        a.dispatched = self.clock()  # replaced by the time the request is written (x.sent_at), if it is
        try:
            async with asyncio.timeout(self.opts.request_timeout_s):
                if conn is None:
                    await self.pool.exchange(a.x)
                else:
                    await self.pool.follow(conn, a.x)
        except TimeoutError:
            a.error = f"timed out after {self.opts.request_timeout_s:g} s"
        except ConnectionError as e:
            a.error = str(e)
        except asyncio.CancelledError:
            a.error = a.error or UNFINISHED  # a stall (watch) names itself
            raise

    def on_done(self, task: asyncio.Task) -> None:
        i = self.tasks.pop(task)
        self.left -= 1
        self.bar.update(1)
        opts = self.opts
        if self.max_errors is not None and self.stopped is None and failed_at_a_glance(self.requests[i], self.attempts[i], opts):
            self.failed += 1
            if self.failed > self.max_errors:  # the probe fails whatever the rest does: stop sending
                self.stopped = (f"{self.failed} of {self.n} requests failed by request {i}, more than the "
                                f"{self.max_errors} allowed")
                self.all_done.set()
        if self.queue is not None and self.stopped is None:
            self.next_closed()
        if self.sessions is not None and self.sessions.successor[i] is not None and not self.all_done.is_set():
            self.release_after(i)
        if self.left == 0:
            self.all_done.set()

    def release_after(self, i: int) -> None:
        """Request i's response ended: its session's next turn goes think_s later, or, if i failed,
        none of the turns after it (never sent; no longer awaited)."""
        sessions = self.sessions
        a, j = self.attempts[i], sessions.successor[i]
        if a.error or a.x.error or a.x.status != 200:
            skipped = sessions.turns_after(i)
            self.left -= skipped
            self.bar.update(skipped)
            return
        spec = self.requests[j]
        ids = self.opts.session_prompt(spec, generated_ids(a.x.body))
        body = _body(dataclasses.replace(spec, prompt_token_ids=ids), self.opts, self.continuous, sessions.users[j])
        self.attempts[j] = _Attempt(self.target.request("POST", self.path, body, self.headers))
        self.attempts[j].planned = self.clock() + spec.think_s
        self.timers.append(self.loop.call_later(spec.think_s, self.launch, j))

    def launch(self, i: int, conn=None) -> None:
        task = self.loop.create_task(self.send(i, conn))
        self.tasks[task] = i
        task.add_done_callback(self.on_done)

    def fire(self, items: list[tuple[int, object]]) -> None:
        for i, conn in items:
            self.launch(i, conn)

    def next_closed(self) -> None:
        """Closed loop: the next request goes when a slot frees up, "planned" then (arrival times are ignored)."""
        i = next(self.queue, None)
        if i is not None:
            self.attempts[i].planned = self.clock()
            self.launch(i)

    async def drive(self) -> LoadResult:
        """Sends every request (paced, or closed-loop), waits for them within the time limit, and collects."""
        opts, pool, clock, loop, n = self.opts, self.pool, self.clock, self.loop, self.n
        requests, attempts = self.requests, self.attempts
        if opts.concurrency is None:
            await asyncio.gather(*pool.replenish())  # open-loop: the first spares, idle, for the pacer's direct sends
        self.bar = tqdm(total=n, desc=opts.progress_desc, unit="req", disable=not opts.progress, file=sys.stderr,
                        leave=False, mininterval=0.5)
        old_switch = sys.getswitchinterval()
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        # A full garbage collection holds the GIL for tens of ms on a harness-sized heap, stalling the
        # pacer and the loop alike; freezing what exists now leaves only the run's own young objects.
        gc.collect()
        gc.freeze()
        old_priority = set_realtime_priority() if opts.realtime_priority is not False else None
        realtime = old_priority is not None
        pacer = None
        cpu0 = time.process_time()
        t0 = clock() + START_LEAD_S
        if opts.concurrency is None:
            paced = self.sessions.paced if self.sessions is not None else range(n)
            order = sorted(paced, key=lambda i: (requests[i].arrival_s, i))
            for i in order:
                attempts[i].planned = t0 + requests[i].arrival_s
            pacer = Pacer(loop, [attempts[i].planned for i in order],
                          lambda items: self.fire([(order[k], conn) for k, conn in items]),
                          realtime=realtime, direct=lambda k: pool.send_direct(attempts[order[k]].x))
            pacer.start()
        else:
            self.queue = iter(range(n))
            await asyncio.sleep(max(0.0, t0 - clock()))
            for _ in range(min(opts.concurrency, n)):
                self.next_closed()
        watched = opts.abort_check is not None or opts.stall_timeout_s is not None
        watchdog = loop.create_task(self.watch()) if watched else None
        try:
            limit = None if self.limit_s is None else max(0.0, t0 + self.limit_s - clock())
            try:
                await asyncio.wait_for(self.all_done.wait(), timeout=limit)
            except TimeoutError:
                pass
        finally:
            # A stream silent since well before this moment never ended; the cleanup below can take
            # over a second on a loaded host and is no silence of the server's
            stopped_listening = clock()
            self.all_done.set()  # from here on a cancelled turn releases nothing
            if watchdog is not None:
                watchdog.cancel()
            self.queue = None
            for timer in self.timers:
                timer.cancel()
            if pacer is not None:
                pacer.stop()
                await asyncio.sleep(0)  # hand-offs the pacer queued before it stopped become tasks, cancelled below
            for task in list(self.tasks):
                task.cancel()
            if self.tasks:
                await asyncio.gather(*self.tasks, return_exceptions=True)
            pool.close()
            sys.setswitchinterval(old_switch)
            gc.unfreeze()
            restore_priority(old_priority)
            self.bar.close()
        wall = clock() - t0
        client = ClientLoad(time.process_time() - cpu0, wall, pool.limit, pool.peak_open, pool.waited, self.continuous,
                            pool.direct_sends, realtime, pacer.wake_lag(opts.lag.quantile) if pacer else math.nan,
                            os.getloadavg()[0])
        result = collect(requests, attempts, t0, opts, client, self.aborted, self.stopped, stopped_listening)
        if opts.realtime_priority and not realtime:
            result = dataclasses.replace(result, notes=(*result.notes, "realtime priority was asked for (SCHED_FIFO) but "
                                                        "is not permitted here: the client ran at normal priority"))
        return result
