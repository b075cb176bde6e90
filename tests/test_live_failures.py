"""A live run that breaks says so loudly: a real in-repo server killed mid-probe stops the run
within seconds, exits 3 naming the server, its exit status and its log, leaves the run directory
partial with the reason (no finished run, no orphan process), and the next run says it broke."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.cli import kill_mid_run

pytestmark = pytest.mark.live  # starts a real server (pyproject.toml markers)

ROOT = Path(__file__).resolve().parent.parent


def _server_pids(port: int) -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"engines.server" in cmd and str(port).encode() in cmd:
            pids.append(int(d.name))
    return pids


def _wait_for_server(logs: Path, deadline: float) -> int:
    while time.monotonic() < deadline:
        for log in logs.glob("server-inrepo-sarathi-*.log"):
            port = int(re.search(r"-(\d+)\.log$", log.name).group(1))
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                    if r.status == 200:
                        return port
            except OSError:
                pass
        time.sleep(0.1)
    raise AssertionError("the server never came up")


def test_a_server_killed_mid_probe_breaks_the_run_loudly(tmp_path):
    results, logs = tmp_path / "results", tmp_path / "logs"
    args = ["experiment=live_smoke", f"results_dir={results}", f"backend.log_dir={logs}", "progress=false",
            "search.fixed_qps=8", "search.num_requests=240", "search.time_limit_s=60"]
    proc = subprocess.Popen([sys.executable, "-m", "harness", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        port = _wait_for_server(logs, time.monotonic() + 120)
        out, err, stopped_after = kill_mid_run(proc, lambda: _server_pids(port)[0])
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 3, err[-3000:]
    assert stopped_after < 10, stopped_after  # not the remaining ~27 s of the probe
    assert "the run broke" in err and "server exited with status -9" in err and "last lines of" in err, err[-3000:]
    assert "results:" not in out  # no result is reported
    runs = list((results / "live_smoke").iterdir())
    assert not [d for d in runs if not d.name.startswith(".")]  # nothing that reads as a finished run
    (partial,) = [d for d in runs if d.name.endswith(".partial")]
    assert "server exited with status -9" in (partial / "FAILED.txt").read_text()
    assert (partial / "config.yaml").is_file()
    assert not _server_pids(port)  # no orphan

    again = subprocess.run([sys.executable, "-m", "harness", *args[:4], "search.fixed_qps=4", "search.num_requests=8"],
                           cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "an earlier run of live_smoke broke (" in again.stdout and str(partial) in again.stdout


def _wait_for_requests(port: int, count: int, proc: subprocess.Popen, timeout_s: float = 120.0) -> None:
    """Until the server has accepted `count` requests (its /metrics requests_received_total)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        received = re.search(r"^\S*requests_received_total(?:\{[^}]*\})? (\S+)$", text, re.M)
        if received and float(received.group(1)) >= count:
            return
        time.sleep(0.2)
    raise AssertionError(f"the run sent no {count} requests in {timeout_s:g} s (exit {proc.poll()})")


def test_an_endpoint_that_stops_answering_breaks_the_run(tmp_path):
    """A server that hangs (SIGSTOP: alive, silent) is caught by /health, not only a dead one."""
    from harness.backends.live.lifecycle import LaunchSpec, ServerProcess, free_port

    port = free_port()
    cmd = [sys.executable, "-m", "engines.server", "--model", "tiny", "--port", str(port), "--time-scale", "4",
           "--kv-capacity-tokens", "65536", "--max-model-len", "1024"]
    server = ServerProcess(LaunchSpec(cmd, f"http://127.0.0.1:{port}", model=None, env={"PYTHONPATH": str(ROOT)},
                                      cwd=str(ROOT)))
    args = ["experiment=yi34b_tp2_strict", "model.name=tiny", "dataset.max_total_tokens=256", "max_model_len=1024",
            "slo.tbt_s=0.05", "scheduler=[sarathi]", "search.num_requests=240", "search.fixed_qps=8",
            "search.time_limit_s=60", "backend=endpoint", f"backend.base_url=http://127.0.0.1:{port}/v1",
            "backend.health_timeout_s=3", "backend.request_timeout_s=120", f"results_dir={tmp_path}", "progress=false",
            "backend.strict=false"]  # the run must break on the hung server, not on a busy host's client lag
    with server:
        proc = subprocess.Popen([sys.executable, "-m", "harness", *args], cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            _wait_for_requests(port, 5, proc)  # checks done, the 30 s probe under way (a fixed sleep raced a loaded host)
            os.kill(server.pid, signal.SIGSTOP)
            stopped = time.monotonic()
            out, err = proc.communicate(timeout=90)
            took = time.monotonic() - stopped
        finally:
            os.kill(server.pid, signal.SIGCONT)
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 3, err[-3000:]
    assert "/health unanswered" in err and took < 15, (took, err[-2000:])
    (partial,) = (tmp_path / "yi34b_tp2_strict").glob(".*.partial")
    assert "/health unanswered" in (partial / "FAILED.txt").read_text()
