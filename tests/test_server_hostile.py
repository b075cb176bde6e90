"""A storm of hostile requests against a real in-repo server: every answer is an OpenAI-shaped
4xx (never a 5xx), slow senders time out with 408, clients that leave early are not logged as
errors, and the server is healthy and serving afterwards."""
from __future__ import annotations

import http.client
import json
import socket
import sys
import time
from pathlib import Path

import pytest

from harness.backends.live.lifecycle import LaunchSpec, ServerProcess, free_port

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("hostile") / "server.log"
    cmd = [sys.executable, "-m", "engines.server", "--model", "tiny", "--port", str(port), "--executor", "null",
           "--max-model-len", "512", "--body-timeout-s", "1", "--max-body-bytes", "65536", "--log-level", "INFO"]
    proc = ServerProcess(LaunchSpec(cmd, f"http://127.0.0.1:{port}", model=None, env={"PYTHONPATH": str(ROOT)},
                                    cwd=str(ROOT), log_path=str(log)))
    with proc:
        yield port, log, proc.proc.pid


def _post(port: int, body: bytes, headers: dict | None = None, path: str = "/v1/completions", method: str = "POST"):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def _hostile_bodies():
    ok = {"model": "tiny", "prompt": [5, 6, 7], "max_tokens": 2}
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


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_hostile_requests_get_4xx_never_5xx(server):
    port, log, pid = server
    kinds = list(_hostile_bodies())
    seen = {}
    rss = []
    for round_ in range(12):  # a few hundred requests in all
        if round_ in (2, 11):  # after the first rounds warmed every code path, and at the end
            rss.append(_rss_mb(pid))
        for name, body, headers in kinds:
            status, raw = _post(port, body, headers)
            seen.setdefault(name, set()).add(status)
            assert 400 <= status < 500, (name, status, raw[:300])
            err = json.loads(raw)["error"]
            assert err["code"] == status and err["message"], (name, raw[:300])
    for path, method in (("/v1/nothing", "POST"), ("/v1/completions", "GET"), ("/v1/models", "DELETE")):
        status, raw = _post(port, b"{}", path=path, method=method)
        assert 400 <= status < 500 and json.loads(raw)["error"]["code"] == status
    assert _post(port, json.dumps({"model": "tiny", "prompt": [5, 6], "max_tokens": 3}).encode())[0] == 200
    text = log.read_text()
    assert "Traceback" not in text and " ERROR " not in text, text[-3000:]
    # Memory stays flat: nine more rounds of the storm (over 200 requests, 100k-deep JSON among
    # them) leave the server's resident memory where the first rounds put it.
    assert rss[1] - rss[0] < 16, f"server RSS grew from {rss[0]:.0f} to {rss[1]:.0f} MB under the storm"


def test_a_slow_sender_times_out_and_early_leavers_are_quiet(server):
    port, log, _ = server
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
    time.sleep(0.5)
    assert _post(port, json.dumps({"prompt": [5, 6], "max_tokens": 3}).encode())[0] == 200
    text = log.read_text()
    assert "Traceback" not in text and " ERROR " not in text, text[-3000:]
