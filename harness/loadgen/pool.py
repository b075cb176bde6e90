"""Keep-alive connections to one server, at most `limit` open (http.py has the why and the
connection itself): a request beyond them waits and is counted; spare idle connections are kept
open for the pacer thread's direct sends."""
from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque
from collections.abc import Callable

from harness.loadgen.http import (CONNECT_FAILED, CONNECTION_LOST, SPARE_FRACTION, SPARE_MIN, Exchange, Target,
                                  _Connection)


class ConnectionPool:
    """Keep-alive connections to one `Target`, at most `limit` open; a request beyond them waits."""

    def __init__(self, target: Target, limit: int, connect_timeout_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if limit < 1:
            raise ValueError(f"a connection pool needs a limit >= 1, got {limit}")
        self.target, self.limit, self.connect_timeout_s, self.clock = target, limit, connect_timeout_s, clock
        self.loop = asyncio.get_running_loop()
        self.ssl = ssl.create_default_context() if target.tls else None
        self.idle: list[_Connection] = []
        self.busy: set[_Connection] = set()
        self.waiters: deque[asyncio.Future] = deque()
        self.waited = 0  # requests that found every connection busy and waited for one
        self.peak_open = 0
        self.direct_sends = 0  # requests the pacer thread wrote itself (only it writes this count)
        self._connecting = 0

    @property
    def num_open(self) -> int:
        return len(self.idle) + len(self.busy) + self._connecting

    async def exchange(self, x: Exchange) -> None:
        """Send `x` and wait for its whole response (or its error, in `x.error`)."""
        conn = await self._acquire()
        reused = conn.used
        conn.send(x)
        await self.follow(conn, x, reused)

    async def follow(self, conn: _Connection, x: Exchange, reused: bool = True) -> None:
        """Wait for the answer to `x`, sent on `conn` (here or by `send_direct`)."""
        try:
            await x.done
        except BaseException:  # cancelled (time limit, timeout): the response is abandoned
            if conn.x is x:
                conn.abort()
            raise
        if reused and x.status == 0 and x.error and x.error.startswith(CONNECTION_LOST):
            x.error, x.pieces = None, []  # a keep-alive connection the server had just closed
            conn = await self._acquire(fresh=True)
            conn.send(x)
            await self.follow(conn, x, reused=False)

    def send_direct(self, x: Exchange) -> _Connection | None:
        """From the pacer thread: `x` written on an idle plain-TCP connection, which is returned
        (the loop then `follow`s it); None when there is none to take, so the loop must send it."""
        if self.ssl is not None:
            return None
        now = self.clock()
        while True:
            try:
                c = self.idle.pop()  # atomic under the GIL; the loop only appends and removes
            except IndexError:
                return None
            if c.fd < 0 or not c.reusable(now):
                self.loop.call_soon_threadsafe(c.abort)
                continue
            self.busy.add(c)
            if c.send_from_thread(x):
                self.direct_sends += 1
                self.loop.call_soon_threadsafe(self.replenish)
                return c

    def replenish(self) -> list[asyncio.Task]:
        """Opens connections (in the background) until the spares wanted are idle or connecting: idle
        connections kept ready, as a new request rarely finds one just freed when streams end at the
        rate they start, and a request that must connect first goes by the loop."""
        wanted = min(self.limit - len(self.busy), SPARE_MIN + int(len(self.busy) * SPARE_FRACTION))
        missing = min(wanted - len(self.idle) - self._connecting, self.limit - self.num_open)
        return [self.loop.create_task(self._spare()) for _ in range(max(0, missing))]

    async def _spare(self) -> None:
        try:
            conn = await self._connect()
        except ConnectionError:
            return  # the run's own requests will say what is wrong with the server
        conn.idle_since = self.clock()
        self.release(conn)

    async def _acquire(self, fresh: bool = False) -> _Connection:
        waited = False
        while True:
            now = self.clock()
            while self.idle and not fresh:
                c = self.idle.pop()  # the most recently used: the least likely to be dropped
                if c.reusable(now):
                    self.busy.add(c)
                    return c
                c.abort()
            if self.num_open < self.limit:
                return await self._connect()
            if not waited:
                waited = True
                self.waited += 1
            fut = self.loop.create_future()
            self.waiters.append(fut)
            try:
                conn = await fut
            except asyncio.CancelledError:
                if fut.done() and not fut.cancelled() and fut.result() is not None:
                    self.release(fut.result())
                raise
            if conn is not None:
                self.busy.add(conn)
                return conn

    async def _connect(self) -> _Connection:
        t = self.target
        self._connecting += 1
        conn = None
        try:
            _, conn = await asyncio.wait_for(
                self.loop.create_connection(lambda: _Connection(self), t.host, t.port, ssl=self.ssl,
                                            server_hostname=t.host if t.tls else None),
                timeout=self.connect_timeout_s)
        except (OSError, TimeoutError) as e:
            reason = f"timed out after {self.connect_timeout_s:g} s" if isinstance(e, TimeoutError) else str(e)
            raise ConnectionError(f"{CONNECT_FAILED}{t.host}:{t.port}: {reason}") from None
        finally:
            self._connecting -= 1
            if conn is None:
                self._hand_over(None)  # the slot is free again: a waiter may try
        self.busy.add(conn)
        self.peak_open = max(self.peak_open, self.num_open)
        return conn

    def _hand_over(self, conn: _Connection | None) -> bool:
        """Gives `conn` (or, with None, the right to open one) to the first live waiter."""
        while self.waiters:
            fut = self.waiters.popleft()
            if not fut.done():
                fut.set_result(conn)
                return True
        return False

    def release(self, conn: _Connection) -> None:
        self.busy.discard(conn)
        if not self._hand_over(conn):
            self.idle.append(conn)

    def discard(self, conn: _Connection) -> None:
        self.busy.discard(conn)
        try:
            self.idle.remove(conn)
        except ValueError:  # not idle (or just taken by the pacer thread, which will find it closed)
            pass
        self._hand_over(None)  # a slot is free: a waiter may open a connection

    def close(self) -> None:
        for c in [*self.idle, *self.busy]:
            c.abort()
        self.idle.clear()
        self.busy.clear()
