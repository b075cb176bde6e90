"""The load generator's HTTP/1.1 client (harness/loadgen/http.py) against real sockets on loopback:
framing split at every byte, each body kind, the bounded pool, a stale keep-alive connection,
errors by kind."""
from __future__ import annotations

import asyncio

import pytest

from harness.loadgen.http import CONNECT_FAILED, CONNECTION_LOST, Exchange, Target
from harness.loadgen.pool import ConnectionPool
from harness.records import error_kind


def _chunked(*payloads: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in payloads) + b"0\r\n\r\n"


HEAD_CHUNKED = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
EVENTS = [b"data: {\"a\": 1}\n\n", b"data: {\"b\": 22}\n\n", b"data: [DONE]\n\n"]


async def _serve(answer, pieces_at=None):
    """A server whose every request is answered by `answer(request_head)`: bytes, written in
    pieces cut at `pieces_at` offsets (each piece its own write, a pause between), or (bytes,
    True) to close the connection after them, or None to close it without a word."""
    async def handle(reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(next((ln.split(b":")[1] for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length")), b"0"))
                await reader.readexactly(length)
                data = answer(head)
                if data is None:
                    writer.close()
                    return
                data, close = data if isinstance(data, tuple) else (data, data.startswith(b"HTTP/1.0"))
                cuts = [0, *(pieces_at or []), len(data)]
                for a, b in zip(cuts, cuts[1:]):
                    writer.write(data[a:b])
                    await writer.drain()
                    await asyncio.sleep(0.002)
                if close:
                    writer.close()
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def _run(coro):
    return asyncio.run(coro)


def _one_exchange(answer, pieces_at=None) -> Exchange:
    """One POST through a fresh pool to a server answering with `answer` (see _serve)."""
    async def go():
        server, port = await _serve(answer, pieces_at)
        pool = ConnectionPool(Target.parse(f"http://127.0.0.1:{port}"), 4)
        x = Exchange(pool.target.request("POST", "/v1/completions", b"{}"))
        await pool.exchange(x)
        pool.close()
        server.close()
        return x
    return _run(go())


@pytest.mark.live
@pytest.mark.parametrize("cut", range(1, len(HEAD_CHUNKED + _chunked(*EVENTS)), 7))
def test_chunked_body_split_anywhere_gives_the_same_payload(cut):
    data = HEAD_CHUNKED + _chunked(*EVENTS)
    x = _one_exchange(lambda h: data, [cut])
    assert x.error is None and x.status == 200 and x.done.done()
    assert x.body == b"".join(EVENTS)
    times = [t for t, _ in x.pieces]
    assert times == sorted(times)


@pytest.mark.live
def test_content_length_and_close_delimited_bodies_and_keep_alive():
    bodies = iter([
        b"HTTP/1.1 404 Not Found\r\nContent-Length: 11\r\n\r\nnot here...",
        b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.0 200 OK\r\n\r\nuntil the end",
    ])

    async def go():
        server, port = await _serve(lambda h: next(bodies))
        pool = ConnectionPool(Target.parse(f"http://127.0.0.1:{port}/v1"), 4)
        xs = []
        for _ in range(3):
            x = Exchange(pool.target.request("GET", "/models"))
            await pool.exchange(x)
            xs.append(x)
        peak = pool.peak_open
        pool.close()
        server.close()
        return xs, peak
    (a, b, c), peak = _run(go())
    assert (a.status, a.body, a.error) == (404, b"not here...", None)
    assert (b.status, b.body, b.error) == (200, b"", None)
    assert (c.status, c.body, c.error) == (200, b"until the end", None)
    assert peak == 1  # one keep-alive connection served all three, one after another
    assert a.request.startswith(b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1:")


@pytest.mark.live
def test_a_full_pool_makes_requests_wait_and_counts_them():
    async def go():
        server, port = await _serve(lambda h: HEAD_CHUNKED + _chunked(*EVENTS), [len(HEAD_CHUNKED) + 5])
        pool = ConnectionPool(Target.parse(f"http://127.0.0.1:{port}"), 2)
        xs = [Exchange(pool.target.request("POST", "/x", b"{}")) for _ in range(6)]
        await asyncio.gather(*(pool.exchange(x) for x in xs))
        out = (xs, pool.peak_open, pool.waited)
        pool.close()
        server.close()
        return out
    xs, peak, waited = _run(go())
    assert all(x.error is None and x.body == b"".join(EVENTS) for x in xs)
    assert peak == 2 and waited == 4
    sent = sorted(x.sent_at for x in xs)
    assert sent[2] > sent[1]  # the third request left only when a connection came free


@pytest.mark.live
def test_a_keep_alive_connection_the_server_dropped_is_retried_once_on_a_new_one():
    answers = iter([b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", None,  # served, then dropped
                    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nagain"])

    async def go():
        server, port = await _serve(lambda h: next(answers))
        pool = ConnectionPool(Target.parse(f"http://127.0.0.1:{port}"), 4)
        first = Exchange(pool.target.request("GET", "/a"))
        await pool.exchange(first)
        second = Exchange(pool.target.request("GET", "/b"))
        await pool.exchange(second)  # the server closes this connection on reading /b
        pool.close()
        server.close()
        return first, second
    first, second = _run(go())
    assert first.body == b"ok"
    assert (second.error, second.body) == (None, b"again")


@pytest.mark.live
def test_errors_name_their_kind():
    async def refused():
        pool = ConnectionPool(Target.parse("http://127.0.0.1:9"), 1, connect_timeout_s=2)
        with pytest.raises(ConnectionError) as e:
            await pool.exchange(Exchange(b"GET / HTTP/1.1\r\n\r\n"))
        return str(e.value)
    msg = _run(refused())
    assert msg.startswith(CONNECT_FAILED) and error_kind(msg) == "connect"

    # A fresh connection closed mid-body: never retried, an error.
    x = _one_exchange(lambda h: (HEAD_CHUNKED + b"5\r\nab", True))
    assert x.error.startswith(CONNECTION_LOST) and error_kind(x.error) == "stream_cut"
    assert x.body == b"ab"


def test_target_parse():
    t = Target.parse("https://example.org/v1/")
    assert (t.host, t.port, t.tls, t.prefix, t.authority) == ("example.org", 443, True, "/v1", "example.org")
    assert Target.parse("http://[::1]:8000").authority == "[::1]:8000"
    with pytest.raises(ValueError):
        Target.parse("ftp://x")


@pytest.mark.live
def test_the_pacer_thread_sends_on_an_idle_connection_and_the_loop_reads_the_answer():
    data = HEAD_CHUNKED + _chunked(*EVENTS)

    async def go():
        server, port = await _serve(lambda h: data, [len(HEAD_CHUNKED) + 3])
        pool = ConnectionPool(Target.parse(f"http://127.0.0.1:{port}"), 4)
        first = Exchange(pool.target.request("POST", "/x", b"{}"))
        await pool.exchange(first)  # leaves one idle keep-alive connection
        second = Exchange(pool.target.request("POST", "/x", b"{}"))
        conn = await asyncio.to_thread(pool.send_direct, second)  # written from another thread
        assert conn is not None and second.sent_at >= first.sent_at
        await pool.follow(conn, second)
        idle_after = len(pool.idle)
        third = Exchange(pool.target.request("POST", "/x", b"{}"))
        tls = ConnectionPool(Target.parse("https://127.0.0.1:1"), 1)
        pool.close()
        server.close()
        return second, idle_after, tls.send_direct(third)
    second, idle_after, tls = _run(go())
    assert second.error is None and second.body == b"".join(EVENTS)
    assert idle_after >= 1  # the connection went back to the pool once answered (spares beside it)
    assert tls is None  # TLS: never written around its transport
