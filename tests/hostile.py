"""The hostile storm: requests no well-behaved client sends, for any OpenAI-compatible address
(the in-repo server, the in-repo router in front of servers). Every answer must be an
OpenAI-shaped 4xx, never a 5xx, and nothing may show up as an error in the process's log."""
from __future__ import annotations

import http.client
import json
import socket
import time
from pathlib import Path

MODEL = "tiny"


def post(port: int, body: bytes, headers: dict | None = None, path: str = "/v1/completions", method: str = "POST"):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def hostile_bodies():
    """(name, body, headers) of each kind of bad request; the server's limits these assume:
    max model length 512, body limit 65536 bytes, the model `tiny`."""
    ok = {"model": MODEL, "prompt": [5, 6, 7], "max_tokens": 2}
    j = lambda d: json.dumps(d).encode()  # noqa: E731
    yield "lone surrogate", b'{"prompt": "hi \\ud800 there", "max_tokens": 2}', {}
    yield "deep json", b"[" * 100_000 + b"]" * 100_000, {}
    yield "deep object", b'{"a":' * 50_000 + b"1" + b"}" * 50_000, {}
    yield "bogus gzip", j(ok), {"Content-Encoding": "gzip"}
    yield "not json", b"hello", {}
    yield "invalid utf-8", b'{"prompt": "\xff\xfe", "max_tokens": 2}', {}
    yield "array", b"[1, 2, 3]", {}
    yield "empty", b"", {}
    yield "null prompt", j({"prompt": None}), {}
    yield "prompt of dicts", j({"prompt": [{"a": 1}]}), {}
    yield "huge id", j({"prompt": [10**30], "max_tokens": 2}), {}
    yield "negative id", j({"prompt": [-1], "max_tokens": 2}), {}
    yield "float ids", j({"prompt": [1.5, 2.5], "max_tokens": 2}), {}
    yield "max_tokens string", j({**ok, "max_tokens": "many"}), {}
    yield "max_tokens huge", j({**ok, "max_tokens": 10**12}), {}
    yield "max_tokens zero", j({**ok, "max_tokens": 0}), {}
    yield "temperature nan", b'{"prompt": [1], "max_tokens": 2, "temperature": NaN}', {}
    yield "top_p inf", b'{"prompt": [1], "max_tokens": 2, "top_p": Infinity}', {}
    yield "unknown model", j({**ok, "model": "gpt-4"}), {}
    yield "model object", j({**ok, "model": {"x": 1}}), {}
    yield "too long", j({"prompt": list(range(1, 600)), "max_tokens": 2}), {}
    yield "over the size limit", b" " * 70_000, {}
    yield "n=2", j({**ok, "n": 2}), {}
    # Streaming options, each way a client can get them wrong, with and without a stream.
    for stream in (True, False, None):
        s = {} if stream is None else {"stream": stream}
        yield f"stream_options list {stream}", j({**ok, **s, "stream_options": [1]}), {}
        yield f"stream_options string {stream}", j({**ok, **s, "stream_options": "yes"}), {}
        yield f"include_usage string {stream}", j({**ok, **s, "stream_options": {"include_usage": "yes"}}), {}
        if stream is not True:  # options without a stream
            yield f"stream_options ok {stream}", j({**ok, **s, "stream_options": {"include_usage": True}}), {}
    yield "stream string", j({**ok, "stream": "yes"}), {}
    yield "stream_options, long", j({**ok, "max_tokens": 5, "stream_options": {"include_usage": True}}), {}
    yield "chat path, stream_options list", j({"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                                               "max_tokens": 3, "stream": True, "stream_options": [1]}), \
        {"path": "/v1/chat/completions"}
    yield "chat, max_completion_tokens string", j({"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                                                   "max_completion_tokens": "x"}), {"path": "/v1/chat/completions"}
    yield "chat, messages missing", j({"model": MODEL, "max_tokens": 3, "stream": True}), \
        {"path": "/v1/chat/completions"}
    yield "kv_transfer_params bogus", j({**ok, "max_tokens": 4, "kv_transfer_params": [1]}), {}


def storm(port: int, rounds: int, between=lambda round_: None) -> None:
    """`rounds` rounds of every hostile kind at the address; each answer an OpenAI-shaped 4xx.
    `between(round_)` runs before each round (e.g. to read the process's memory)."""
    kinds = list(hostile_bodies())
    for round_ in range(rounds):
        between(round_)
        for name, body, headers in kinds:
            headers = dict(headers)
            status, raw = post(port, body, headers, path=headers.pop("path", "/v1/completions"))
            assert 400 <= status < 500, (name, status, raw[:300])
            err = json.loads(raw)["error"]
            assert err["code"] == status and err["message"], (name, raw[:300])
    for path, method in (("/v1/nothing", "POST"), ("/v1/completions", "GET"), ("/v1/models", "DELETE")):
        status, raw = post(port, b"{}", path=path, method=method)
        assert 400 <= status < 500 and json.loads(raw)["error"]["code"] == status, (path, method, status, raw[:300])
    ok = json.dumps({"model": MODEL, "prompt": [5, 6], "max_tokens": 3}).encode()
    assert post(port, ok)[0] == 200


def slow_sender_and_early_leavers(port: int) -> None:
    """A client that never finishes its body gets 408 within a few seconds (the process's body
    timeout is 1 s); twenty that leave before their answer, five in the middle of it; then the
    address still serves."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 100\r\n\r\n{\"prompt\": ")
        s.settimeout(10)
        t0 = time.monotonic()
        head = s.recv(4096)
        assert b" 408 " in head.split(b"\r\n")[0] and time.monotonic() - t0 < 5, head[:200]
    for _ in range(20):  # clients that send a request and leave before the first byte comes back
        with socket.create_connection(("127.0.0.1", port)) as s:
            body = json.dumps({"prompt": [5, 6, 7], "max_tokens": 50, "stream": True}).encode()
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    for _ in range(5):  # and five that leave mid-stream: the process's next write finds them gone
        with socket.create_connection(("127.0.0.1", port)) as s:
            body = json.dumps({"prompt": [5, 6, 7], "max_tokens": 500, "stream": True}).encode()
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            s.settimeout(10)
            assert s.recv(4096).startswith(b"HTTP/1.1 200")  # the stream has begun; unread bytes left: a reset
    time.sleep(0.5)
    assert post(port, json.dumps({"prompt": [5, 6], "max_tokens": 3}).encode())[0] == 200


def assert_quiet(log: Path) -> None:
    """Client faults are no errors of the process: no traceback, no ERROR line in its log."""
    text = log.read_text()
    assert "Traceback" not in text and " ERROR " not in text, text[-3000:]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")
