"""A streaming server for load-generator benchmarks, cheap enough that the client is what saturates.

    python benchmarks/stream_sink.py --port 8000 [--tick-ms 5]

It speaks the slice of vLLM's OpenAI API that benchmark clients use (POST /v1/completions,
streamed; GET /health, /v1/models) and does no inference: like an engine, it runs iterations
(one every --tick-ms) and each iteration writes one SSE event, one token, to every running
stream, each event its own write. The prompt is ignored; `max_tokens` tokens are sent, then a
usage chunk and [DONE] (usage on every event when the request asks for
`continuous_usage_stats`). GET /stats gives the arrival time (CLOCK_MONOTONIC) of every
completion request since the last /stats, and the sink's own CPU time, so a benchmark can judge
any client's schedule at the server, the same way for all.

A raw asyncio protocol (uvloop when installed), no framework: a few microseconds per event.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import re
import time

SLICE = 32  # streams written between two looks at arriving requests
MAX_TOKENS = re.compile(rb'"max_tokens"\s*:\s*(\d+)')
CONTINUOUS = re.compile(rb'"continuous_usage_stats"\s*:\s*true')


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _event(obj: dict) -> bytes:
    return _chunk(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")


HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n")
BASE = {"id": "cmpl-sink", "object": "text_completion", "created": 0, "model": "tiny"}


def _token(finish: str | None, usage: dict | None = None) -> bytes:
    choice = {"index": 0, "text": " a", "logprobs": None, "finish_reason": finish, "stop_reason": None}
    return _event({**BASE, "choices": [choice], "usage": usage})


TOKEN, LAST = _token(None), _token("length")
DONE = _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"


def _usage(prompt: int, done: int) -> dict:
    return {"prompt_tokens": prompt, "completion_tokens": done, "total_tokens": prompt + done}


class Stream:
    __slots__ = ("continuous", "left", "sent", "transport")

    def __init__(self, transport, n: int, continuous: bool) -> None:
        self.transport, self.left, self.sent, self.continuous = transport, n, 0, continuous


class Sink:
    def __init__(self, tick_s: float) -> None:
        self.tick_s = tick_s
        self.streams: list[Stream] = []
        self.arrivals: list[float] = []

    async def iterate(self) -> None:
        loop = asyncio.get_running_loop()
        next_t = loop.time()
        while True:
            next_t += self.tick_s
            await asyncio.sleep(max(0.0, next_t - loop.time()))
            streams, keep = self.streams, []
            self.streams = []  # streams that arrive while this iteration is written join the next
            for k, s in enumerate(streams):
                if k and k % SLICE == 0:
                    # Let the loop read arriving requests between slices: their arrival stamps
                    # (what the benchmark judges clients by) must not wait for a whole burst.
                    await asyncio.sleep(0)
                if s.transport.is_closing():
                    continue
                s.left -= 1
                s.sent += 1
                if s.continuous:
                    s.transport.write(_token("length" if not s.left else None, _usage(32, s.sent)))
                else:
                    s.transport.write(LAST if not s.left else TOKEN)
                if s.left:
                    keep.append(s)
                else:
                    s.transport.write(_event({**BASE, "choices": [], "usage": _usage(32, s.sent)}) + DONE)
            self.streams = keep + self.streams


class Http(asyncio.Protocol):
    def __init__(self, sink: Sink) -> None:
        self.sink, self.buf, self.transport = sink, b"", None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end]
            m = re.search(rb"(?i)content-length:\s*(\d+)", head)
            length = int(m.group(1)) if m else 0
            if len(self.buf) < end + 4 + length:
                return
            body, self.buf = self.buf[end + 4:end + 4 + length], self.buf[end + 4 + length:]
            self.answer(head.split(b" ", 2), body)

    def answer(self, line: list[bytes], body: bytes) -> None:
        method, path = line[0], line[1]
        if method == b"POST" and path.endswith(b"/completions"):
            self.sink.arrivals.append(time.monotonic())
            m = MAX_TOKENS.search(body)
            self.transport.write(HEAD)
            self.sink.streams.append(Stream(self.transport, int(m.group(1)) if m else 16, bool(CONTINUOUS.search(body))))
            return
        if path == b"/stats":
            payload = json.dumps({"arrivals": self.sink.arrivals, "cpu_s": time.process_time()}).encode()
            self.sink.arrivals = []
        elif path.endswith(b"/models"):
            payload = json.dumps({"object": "list", "data": [{"id": "tiny", "object": "model", "max_model_len": 1 << 20}]}).encode()
        else:
            payload = b"{}"
        self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                             % (len(payload), payload))


async def serve(port: int, tick_s: float) -> None:
    sink = Sink(tick_s)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Http(sink), "127.0.0.1", port, backlog=4096)
    print(f"stream sink on http://127.0.0.1:{port}, an iteration every {tick_s * 1e3:g} ms", flush=True)
    async with server:
        await sink.iterate()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--tick-ms", type=float, default=5.0, help="one iteration (one token per stream) every this long")
    args = ap.parse_args()
    try:
        import uvloop
        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    runner(serve(args.port, args.tick_ms / 1e3))


if __name__ == "__main__":
    main()
