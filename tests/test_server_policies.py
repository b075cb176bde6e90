"""Every engine policy serves concurrent streams through the server; shutdown is graceful."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from engines.schedulers import SchedulerConfig
from engines.server.config import ServerConfig
from harness.backends.live import LiveServerSpec, run_live_result
from harness.loadgen import LoadOptions
from harness.backends.live.lifecycle import free_port
from harness.records import RequestSpec
from tests.policy_workloads import BUILT_IN

pytestmark = pytest.mark.live  # starts a real server (pyproject.toml markers)

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("policy", BUILT_IN)
def test_each_policy_serves_a_burst(policy):
    rng = np.random.default_rng(3)
    reqs = [RequestSpec(i, 0.002 * i, int(rng.integers(20, 700)), int(rng.integers(1, 30))) for i in range(40)]
    sched = SchedulerConfig.shared(policy, max_num_seqs=16, token_budget=256)
    spec = LiveServerSpec(kind="inrepo", scheduler=sched, model="tiny", max_model_len=1024, ready_timeout_s=60,
                          config=ServerConfig(executor="null", kv_capacity_tokens=16384))
    res = run_live_result(reqs, spec, LoadOptions(progress=False, strict=False))
    assert [r.error for r in res.records] == [None] * 40
    assert all(r.completed and r.first_scheduled_s <= r.first_token_s for r in res.records)
    assert set(res.token_sources) == {"token_ids"}  # the server names each event's tokens


def _wait_health(url: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/health", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise AssertionError("server did not come up")


def test_sigterm_lets_running_streams_finish_then_exits_cleanly():
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "engines.server", "--model", "tiny", "--port", str(port),
                             "--executor", "realtime", "--time-scale", "20", "--shutdown-grace-s", "10"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        _wait_health(url)
        result = {}

        def stream():
            body = json.dumps({"model": "tiny", "prompt": [5] * 20, "max_tokens": 15, "stream": True,
                               "stream_options": {"include_usage": True}}).encode()
            req = urllib.request.Request(url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=30) as r:
                result["body"] = r.read()

        t = threading.Thread(target=stream)
        t.start()
        time.sleep(0.3)  # the stream is running (each iteration ~40 ms at time scale 20)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.1)
        with pytest.raises(OSError):  # draining: new work refused (503) or the socket already closed
            urllib.request.urlopen(url + "/health", timeout=2)
        t.join(20)
        assert proc.wait(20) == 0
        assert b'"completion_tokens":15' in result["body"] and result["body"].endswith(b"data: [DONE]\n\n")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_missing_torch_model_directory_is_a_clear_error(tmp_path):
    # torch is installed: the torch executor starts building and must refuse a model path that
    # does not exist, naming it in the last line it prints, before it ever listens.
    missing = tmp_path / "no-such-model"
    proc = subprocess.run([sys.executable, "-m", "engines.server", "--executor", "torch", "--port", "0",
                           "--model", str(missing)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr[-2000:]
    assert "serving" not in proc.stdout
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and f"unknown model '{missing}'" in lines[0], proc.stderr[-2000:]
