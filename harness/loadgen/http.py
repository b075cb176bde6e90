"""A small HTTP/1.1 client for streamed responses, built to measure: bytes are timestamped where
they come off the socket and kept; nothing else happens per event while a run is on.

Why not aiohttp (which the rest of the harness uses for its own requests): per SSE event aiohttp
runs its parser callbacks, a StreamReader and a coroutine wake-up, about 20 us of CPU on the
2-core development machine; `vllm bench serve` pays the same, so no client built on it can be much
faster than vllm bench (benchmarks/bench_loadgen.py measures both). Here `data_received` takes
one timestamp per read, strips the chunked framing with a few slices and appends the payload;
SSE events are split (common/sse.py) and JSON parsed after the run (tokens.py).

What it does: keep-alive connections in a bounded pool (one request per connection at a time, no
pipelining; a request waits for a free connection when all are busy, and the pool counts how
many did), http and https, Content-Length, chunked and close-delimited bodies. What it does not:
proxies, redirects, compression (it asks for identity encoding), HTTP/2.

Direct sends (`send_direct`): over plain TCP, a request due while the event loop is busy reading
a burst of events (an engine's iteration answers every running stream at once: hundreds of
reads, a millisecond or more of work) would wait for the whole burst. So the pacer thread
writes it itself, with one `os.write` on an idle keep-alive connection's socket, and the loop
only reads the answer. Safe because nothing else writes to an idle connection (its transport's
buffer is empty), and a connection is flagged closed, under the GIL, before its socket is.
"""
from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from harness.loadgen.pool import ConnectionPool

MAX_HEAD_BYTES = 1 << 16
SPARE_MIN, SPARE_FRACTION = 8, 1 / 16  # idle connections kept open for direct sends (spares)
IDLE_REUSE_S = 2.0  # an idle connection older than this is closed, not reused: servers drop idle
# keep-alive connections (uvicorn, under vLLM: after 5 s) and a request written just as the server
# closes is lost; a younger one lost before any answer is retried once on a new connection.
CONNECT_FAILED = "connect failed: "
CONNECTION_LOST = "connection lost: "


@dataclass(frozen=True)
class Target:
    """Where requests go: scheme, host and port of a base URL; its path is the prefix of every path."""

    host: str
    port: int
    tls: bool
    prefix: str

    @classmethod
    def parse(cls, base_url: str) -> Target:
        u = urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        return cls(u.hostname, u.port or (443 if u.scheme == "https" else 80), u.scheme == "https", u.path.rstrip("/"))

    @property
    def authority(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == (443 if self.tls else 80) else f"{host}:{self.port}"

    def request(self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None) -> bytes:
        """The bytes of one request (built before a run, so that sending is one write)."""
        lines = [f"{method} {self.prefix}{path} HTTP/1.1", f"Host: {self.authority}", "Accept-Encoding: identity",
                 f"Content-Length: {len(body)}"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class Exchange:
    """One request and its response as it arrives: `pieces` are the body's bytes (framing removed),
    each with the time its read came off the socket."""

    __slots__ = ("done", "error", "pieces", "request", "sent_at", "status")

    def __init__(self, request: bytes) -> None:
        self.request = request
        self.status = 0
        self.pieces: list[tuple[float, bytes]] = []
        self.error: str | None = None
        self.sent_at = float("nan")  # when the request's write to its socket began
        self.done: asyncio.Future | None = None

    @property
    def body(self) -> bytes:
        return b"".join(p for _, p in self.pieces)


class _Connection(asyncio.Protocol):
    """One TCP (or TLS) connection; reads one response at a time into its `Exchange`."""

    def __init__(self, pool: ConnectionPool) -> None:
        self.pool = pool
        self.clock = pool.clock
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.fd = -1
        self.used = False
        self.idle_since = 0.0
        self.x: Exchange | None = None
        self.head: bytes | None = None  # the response head read so far; None once the body began
        self.mode = ""  # length | chunked | close
        self.need = 0  # length: body bytes left; chunked: bytes left of the current chunk (+ its CRLF)
        self.line = b""  # chunked: a size line split across reads
        self.trailer = False  # chunked: past the last chunk, reading to the blank line
        self.keep_alive = True

    # -- asyncio.Protocol ---------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        self.fd = sock.fileno() if sock is not None and self.pool.ssl is None else -1

    def eof_received(self) -> bool:
        self.closed = True  # before the transport closes the socket: no direct send may pick it
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        x = self.x
        if x is not None and self.head is None and self.mode == "close":
            self._finish()  # a close-delimited body ends with its connection
        elif x is not None:
            self._fail(CONNECTION_LOST + (str(exc) if exc else "the server closed the connection")
                       + (" before answering" if self.head == b"" else " mid-response"))
        self.pool.discard(self)

    def data_received(self, data: bytes) -> None:
        t = self.clock()
        if self.x is None:
            return  # bytes nobody asked for (a server talking after its response): ignored
        if self.head is not None:
            head = self.head + data
            end = head.find(b"\r\n\r\n")
            if end < 0:
                self.head = head
                if len(head) > MAX_HEAD_BYTES:
                    self._fail(f"response head over {MAX_HEAD_BYTES} bytes")
                    self.abort()
                return
            self.head = None
            if not self._start(head[:end]):
                return
            data = head[end + 4:]
        if data or self.mode == "length":
            self._body(t, data)

    # -- the response ---------------------------------------------------------------------------
    def _expect(self, x: Exchange) -> None:
        self.x, self.head, self.line, self.trailer, self.used = x, b"", b"", False, True
        x.done = asyncio.Future(loop=self.pool.loop)

    def send(self, x: Exchange) -> None:
        self._expect(x)
        # Stamped as the write begins: the write is one send() that a loopback server may answer
        # (and stamp its arrival) before the call returns.
        x.sent_at = self.clock()
        self.transport.write(x.request)

    def send_from_thread(self, x: Exchange) -> bool:
        """Write `x` from the pacer thread (module docstring); False if the socket refused it."""
        self._expect(x)
        x.sent_at = self.clock()
        try:
            n = os.write(self.fd, x.request)
        except BlockingIOError:
            n = 0
        except OSError:  # the server has just closed it: the loop will see it go
            self.x, x.sent_at, x.done = None, float("nan"), None
            self.closed = True
            self.pool.loop.call_soon_threadsafe(self.abort)
            return False
        if n < len(x.request):  # a full socket buffer: the loop writes the rest, in order
            self.pool.loop.call_soon_threadsafe(self.transport.write, x.request[n:])
        return True

    def _start(self, head: bytes) -> bool:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        try:
            status = int(parts[1])
        except (IndexError, ValueError):
            self._fail(f"not an HTTP response: {lines[0][:80]!r}")
            self.abort()
            return False
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip().lower()
        self.x.status = status
        self.keep_alive = parts[0] == "HTTP/1.1" and headers.get("connection") != "close"
        if "chunked" in headers.get("transfer-encoding", ""):
            self.mode, self.need = "chunked", 0
        elif "content-length" in headers:
            self.mode, self.need = "length", int(headers["content-length"])
        elif status in (204, 304) or 100 <= status < 200:
            self.mode, self.need = "length", 0
        else:
            self.mode, self.keep_alive = "close", False
        return True

    def _body(self, t: float, data: bytes) -> None:
        pieces = self.x.pieces
        if self.mode == "length":
            take = data[: self.need]
            if take:
                pieces.append((t, take))
            self.need -= len(take)
            if self.need == 0:
                self._finish()
            return
        if self.mode == "close":
            pieces.append((t, data))
            return
        # chunked: [size line CRLF, payload, CRLF]* then "0" CRLF, trailers, CRLF
        if self.line:
            data, self.line = self.line + data, b""
        pos, n = 0, len(data)
        while pos < n:
            if self.need:
                take = min(self.need, n - pos)
                payload = min(take, self.need - 2)  # the chunk's closing CRLF is not payload
                if payload > 0:
                    pieces.append((t, data[pos:pos + payload]))
                self.need -= take
                pos += take
                continue
            end = data.find(b"\r\n", pos)
            if end < 0:
                self.line = data[pos:]
                return
            line, pos = data[pos:end], end + 2
            if self.trailer:
                if not line:
                    self._finish()
                    return
                continue
            try:
                size = int(line.split(b";", 1)[0], 16)
            except ValueError:
                self._fail(f"bad chunk size line {line[:40]!r}")
                self.abort()
                return
            if size == 0:
                self.trailer = True
            else:
                self.need = size + 2

    def _finish(self) -> None:
        x, self.x = self.x, None
        if not x.done.done():
            x.done.set_result(None)
        if self.keep_alive and not self.closed:
            self.idle_since = self.clock()
            self.pool.release(self)
        else:
            self.abort()

    def _fail(self, error: str) -> None:
        x, self.x = self.x, None
        x.error = x.error or error
        if not x.done.done():
            x.done.set_result(None)

    def reusable(self, now: float) -> bool:
        """Open, and idle for less than IDLE_REUSE_S (the server may be about to drop it)."""
        return not self.closed and now - self.idle_since < IDLE_REUSE_S

    def abort(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.closed = True
            self.transport.abort()
