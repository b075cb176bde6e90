"""backend=endpoint: the capacity search against a server the harness did not start, with and
without an API key; bad keys, unknown models and unreachable servers are one line and exit 2.
The in-repo server here is started separately, as a user's deployment would be."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from harness.backends.live.lifecycle import LaunchSpec, ServerProcess, free_port

ROOT = Path(__file__).resolve().parent.parent
KEY = "test-key-123"


def _server(key: str | None):
    port = free_port()
    env = {"PYTHONPATH": str(ROOT)}
    if key:
        env["ENGINES_SERVER_API_KEY"] = key
    cmd = [sys.executable, "-m", "engines.server", "--model", "tiny", "--served-model-name", "tiny-served",
           "--port", str(port), "--time-scale", "4", "--kv-capacity-tokens", "65536", "--max-model-len", "1024"]
    return ServerProcess(LaunchSpec(cmd, f"http://127.0.0.1:{port}", model=None, env=env, cwd=str(ROOT))), port


@pytest.fixture(scope="module")
def keyed():
    server, port = _server(KEY)
    with server:
        yield port


def _harness(port: int, tmp_path: Path, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    args = ["experiment=yi34b_tp2_strict", "model.name=tiny", "dataset.max_total_tokens=256", "max_model_len=1024",
            "slo.tbt_s=0.05", "scheduler=[sarathi]", "search.num_requests=48", "search.fixed_qps=6",
            "search.time_limit_s=30", "backend=endpoint", f"backend.base_url=http://127.0.0.1:{port}/v1",
            f"results_dir={tmp_path}", "progress=false",
            "backend.strict=false", *extra]  # the subject is the endpoint's checks, not the client's timing
    run_env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"} | (env or {})
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=run_env)


def _get(url: str, key: str | None = None) -> tuple[int, dict | str]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            body = r.read().decode()
            return r.status, json.loads(body) if body.startswith("{") else body
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.mark.live
def test_the_keyed_server_guards_v1_only(keyed):
    base = f"http://127.0.0.1:{keyed}"
    status, body = _get(base + "/v1/models")
    assert status == 401 and body["error"]["type"] == "authentication_error" and body["error"]["code"] == 401
    assert _get(base + "/v1/models", "wrong")[0] == 401
    status, body = _get(base + "/v1/models", KEY)
    assert status == 200 and body["data"][0]["id"] == "tiny-served" and body["data"][0]["root"] == "tiny-served"
    assert body["data"][0]["max_model_len"] == 1024  # as vLLM reports it: the endpoint backend fits the plan to it
    assert _get(base + "/health")[0] == 200 and _get(base + "/metrics")[0] == 200


@pytest.mark.live
def test_a_capacity_probe_against_a_server_it_did_not_start(keyed, tmp_path):
    p = _harness(keyed, tmp_path, f"backend.api_key={KEY}")
    assert p.returncode == 0, p.stderr[-3000:]
    run = Path(p.stdout.strip().splitlines()[-1].removeprefix("results: "))
    summary = json.loads((run / "summary.json").read_text())
    assert summary["backend"] == "endpoint"
    assert KEY not in (run / "config.yaml").read_text() and "<redacted>" in (run / "config.yaml").read_text()
    (probe,) = summary["schedulers"]["tiny-served"]["probes"]  # the server's own name: no scheduler of ours ran
    assert probe["num_completed"] == 48 and probe["num_errors"] == 0
    # the key from the environment, as the OpenAI SDK reads it
    assert _harness(keyed, tmp_path, env={"OPENAI_API_KEY": KEY}).returncode == 0


@pytest.mark.parametrize("extra, env, says", [
    ((), {}, "no API key was sent"),
    (("backend.api_key=wrong",), {}, "the API key was refused"),
    ((f"backend.api_key={KEY}", "backend.served_model=gpt-4"), {}, "does not serve model 'gpt-4'; it serves: tiny-served"),
])
@pytest.mark.live
def test_bad_endpoint_input_is_one_line(keyed, tmp_path, extra, env, says):
    p = _harness(keyed, tmp_path, *extra, env=env)
    assert p.returncode == 2, p.stderr[-2000:]
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], p.stderr
    assert not list((tmp_path / "yi34b_tp2_strict").glob(".*.partial"))  # nothing left behind


def test_an_unreachable_endpoint_is_one_line(tmp_path):
    p = _harness(free_port(), tmp_path, "backend.ready_timeout_s=1")
    assert p.returncode == 2 and "does not answer" in p.stderr, p.stderr[-2000:]


@pytest.mark.live
def test_a_server_without_a_key_and_a_managed_server_with_one(tmp_path):
    server, port = _server(None)
    with server:
        p = _harness(port, tmp_path, "backend.served_model=tiny-served")
        assert p.returncode == 0, p.stderr[-3000:]
    # backend=live with a key: the harness starts its server requiring it and sends it
    p = subprocess.run([sys.executable, "-m", "harness", "experiment=live_smoke", f"backend.api_key={KEY}",
                        "search.fixed_qps=8", "search.num_requests=16", f"results_dir={tmp_path}", "progress=false"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert KEY not in p.stdout + p.stderr  # never printed
