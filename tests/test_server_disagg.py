"""The in-repo server's prefill and decode roles and the in-repo router, as real processes on
loopback (engines/server/handoff.py, engines/server/router): a request through the router gets
its first token from the prefill server and the rest from the decode server, which waits the KV
transfer's price first; the roles refuse what they cannot do; failures are errors, never short
answers; bad flags exit 2."""
from __future__ import annotations

import json
import math
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from engines.perf import get_model
from engines.perf.links import get_link
from engines.perf.transfer import KvTransfer
from engines.server.handoff import KvIntake, Prefilled
from harness.backends.live.lifecycle import LaunchSpec, ServerProcess, free_port
from common.sse import SseSplitter

ROOT = Path(__file__).resolve().parent.parent
ENV = {"PYTHONPATH": str(ROOT)}
SCALE = 4.0
COMMON = ["--model", "mistral-7b", "--executor", "realtime", "--time-scale", str(SCALE), "--kv-capacity-tokens",
          "65536", "--max-model-len", "4096"]


def _server(*flags, module="engines.server", warm=True):
    port = free_port()
    cmd = [sys.executable, "-m", module, "--port", str(port), *flags]
    return ServerProcess(LaunchSpec(cmd, f"http://127.0.0.1:{port}", model="mistral-7b" if warm else None, env=ENV,
                                    cwd=str(ROOT), warmup_max_tokens=1, ready_timeout_s=60))


def _post(url, body, timeout=60):
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _events(raw: bytes) -> list[dict]:
    return [json.loads(e) for e in SseSplitter().feed(raw) if e != b"[DONE]"]


@pytest.fixture(scope="module")
def cluster():
    prefill = _server("--role", "prefill", *COMMON)
    decode = _server("--role", "decode", "--kv-link", "eth100g", *COMMON)
    with prefill, decode:
        router = _server("--prefill", prefill.base_url, "--decode", decode.base_url, module="engines.server.router")
        with router:
            yield prefill, decode, router


@pytest.mark.live
def test_a_request_through_the_router_is_whole_and_waits_for_its_kv(cluster):
    _, _, router = cluster
    prompt = list(range(10, 2010))
    status, raw = _post(router.base_url, {"prompt": prompt, "max_tokens": 6, "stream": True,
                                          "stream_options": {"include_usage": True}})
    assert status == 200
    events = _events(raw)
    tokens = [t for e in events for c in e.get("choices") or [] for t in c["token_ids"]]
    assert len(tokens) == 6
    assert [c["finish_reason"] for e in events for c in e.get("choices") or []][-1] == "length"
    assert all(c["finish_reason"] is None for e in events[:-2] for c in e.get("choices") or [])
    final = events[-1]
    assert final["usage"] == {"prompt_tokens": 2000, "completion_tokens": 6, "total_tokens": 2006}
    times = final["server_timing"]["token_times"]
    assert len(times) == 6 and final["server_timing"]["first_scheduled"] < times[0]
    # The gap to token 2 holds the transfer's price (2,000 tokens of Mistral-7B's KV over 100 Gb/s
    # Ethernet, stretched as the twin stretches iterations) and one decode iteration.
    arch = get_model("mistral-7b")
    price = SCALE * KvTransfer(get_link("eth100g"), arch.kv_bytes_per_token, arch.num_layers, "after_prefill").seconds(2000)
    assert price > 0.1
    assert times[1] - times[0] >= price
    assert np.all(np.diff(times[1:]) < price)  # decodes after it do not wait again


@pytest.mark.live
def test_a_whole_answer_through_the_router_joins_both_servers(cluster):
    _, _, router = cluster
    status, raw = _post(router.base_url, {"prompt": [5, 6, 7, 8], "max_tokens": 4})
    body = json.loads(raw)
    assert status == 200 and len(body["choices"][0]["token_ids"]) == 4 and body["usage"]["completion_tokens"] == 4
    assert len(body["choices"][0]["text"].split()) == 4 and "kv_transfer_params" not in body


@pytest.mark.live
def test_the_roles_refuse_what_they_cannot_do(cluster):
    prefill, decode, router = cluster
    status, raw = _post(prefill.base_url, {"prompt": [5, 6], "max_tokens": 3})
    assert status == 400 and "max_tokens must be 1" in json.loads(raw)["error"]["message"]
    too_long = {"prompt": [5] * 100, "max_tokens": 1, "kv_transfer_params": {"do_remote_decode": True, "max_tokens": 4000}}
    status, raw = _post(prefill.base_url, too_long)
    assert status == 400 and "maximum context length" in json.loads(raw)["error"]["message"]
    # ... and through the router, before any token: the prefill server's own answer.
    status, raw = _post(router.base_url, {"prompt": [5] * 100, "max_tokens": 4000, "stream": True})
    assert status == 400 and "maximum context length" in json.loads(raw)["error"]["message"]
    for params, message in ((7, "must be an object"), ({"source": 0, "prefill_s": -1}, "'prefill_s' must be"),
                            ({"source": 0, "prefill_s": 0.1, "prompt_tokens": 3}, "computed 3 prompt tokens")):
        status, raw = _post(decode.base_url, {"prompt": [5, 6], "max_tokens": 3, "kv_transfer_params": params})
        assert status == 400 and message in json.loads(raw)["error"]["message"], raw
    status, raw = _post(decode.base_url, {"prompt": [5, 6], "max_tokens": 1,
                                          "kv_transfer_params": {"source": 0, "prefill_s": 0.0}})
    assert status == 400 and "max_tokens must be >= 2" in json.loads(raw)["error"]["message"]


@pytest.mark.live
def test_a_dead_decode_server_is_an_error_in_the_stream_not_a_short_answer():
    prefill = _server("--role", "prefill", "--model", "mistral-7b", "--executor", "null")
    gone = f"http://127.0.0.1:{free_port()}"
    with prefill, _server("--prefill", prefill.base_url, "--decode", gone, module="engines.server.router",
                          warm=False) as router:
        status, raw = _post(router.base_url, {"prompt": [5, 6, 7], "max_tokens": 5, "stream": True})
    events = _events(raw)
    assert status == 200 and len([e for e in events if e.get("choices")]) == 1  # the prefill's token went out at once
    assert f"decode server {gone}" in events[-1]["error"]["message"]


def test_the_transfers_from_one_prefill_server_queue_and_scale_exactly():
    tr = KvTransfer(get_link("eth100g"), 131072.0, 32, "after_prefill")
    intake = KvIntake([tr, tr], time_scale=3.0)
    one = intake.lands(Prefilled(0, 0.05), 1000, now=10.0)
    assert math.isclose(one, 10.0 + 3.0 * tr.seconds(1000))
    assert math.isclose(intake.lands(Prefilled(0, 0.05), 1000, now=10.0), one + 3.0 * tr.seconds(1000))  # behind it
    assert math.isclose(intake.lands(Prefilled(1, 0.05), 1000, now=10.0), one)  # another prefill server's link
    layerwise = KvIntake([KvTransfer(tr.link, tr.lane_bytes_per_token, 32, "layerwise")], time_scale=2.0)
    # A prefill of 1 s hides all but one layer's share of the transfer.
    assert math.isclose(layerwise.lands(Prefilled(0, 1.0), 1000, now=5.0), 5.0 + 2.0 * tr.seconds(1000) / 32)
    assert KvIntake([]).lands(Prefilled(3, 0.0), 1000, now=1.5) == 1.5  # null executor: no link, no time


@pytest.mark.parametrize("module,flags,message", [
    ("engines.server", ["--role", "decode", "--executor", "torch"], "role decode with executor torch"),
    ("engines.server", ["--role", "decode"], "needs --kv-link"),
    ("engines.server", ["--role", "decode", "--kv-link", "carrier-pigeon"], "unknown link 'carrier-pigeon'"),
    ("engines.server.router", ["--prefill", "http://127.0.0.1:1"], "needs prefill and decode servers"),
    ("engines.server.router", ["--replica", "http://127.0.0.1:1", "--router", "least_kv"], "least_kv needs"),
])
def test_bad_flags_exit_2_naming_the_problem(module, flags, message):
    p = subprocess.run([sys.executable, "-m", module, *flags], capture_output=True, text=True, cwd=ROOT, env=ENV,
                       timeout=60)
    assert p.returncode == 2 and message in p.stderr.strip().splitlines()[-1], p.stderr
