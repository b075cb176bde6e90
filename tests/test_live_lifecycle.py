"""The server launcher: readiness with a log tail on failure, and no orphan processes, ever."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from harness.backends.live.lifecycle import LaunchSpec, ServerProcess, ServerStartError, free_port

# A server that spawns a grandchild (as vLLM spawns its engine core), writes both pids to a file,
# and answers /health: what matters is that stopping it leaves neither process behind.
FAKE_SERVER = textwrap.dedent("""
    import http.server, subprocess, sys
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    open(sys.argv[2], "w").write(f"{child.pid}\\n")
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404); self.end_headers()
        def log_message(self, *a): pass
    print("fake server up", flush=True)
    http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
""")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purpose (its parent just has not reaped it yet).
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _fake(tmp_path: Path, **kw) -> tuple[ServerProcess, Path]:
    port = free_port()
    pids = tmp_path / "pids"
    spec = LaunchSpec([sys.executable, "-c", FAKE_SERVER, str(port), str(pids)], f"http://127.0.0.1:{port}",
                      model=None, ready_timeout_s=20, stop_timeout_s=3, log_path=str(tmp_path / "log"), **kw)
    return ServerProcess(spec), pids


def _wait_gone(pids: list[int], timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not any(_alive(p) for p in pids):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.live
def test_stop_takes_down_the_whole_process_group(tmp_path):
    srv, pids_file = _fake(tmp_path)
    with srv:
        leader = srv.pid
        grandchild = int(pids_file.read_text())
        assert _alive(leader) and _alive(grandchild)
    assert _wait_gone([leader, grandchild])


@pytest.mark.live
def test_an_exception_or_ctrl_c_inside_the_block_still_stops_everything(tmp_path):
    for exc in (RuntimeError("boom"), KeyboardInterrupt()):
        srv, pids_file = _fake(tmp_path)
        with pytest.raises(type(exc)):
            with srv:
                grandchild = int(pids_file.read_text())
                raise exc
        assert _wait_gone([srv.pid, grandchild])


@pytest.mark.live
def test_a_group_ignoring_sigterm_is_killed_after_the_grace_period(tmp_path):
    port = free_port()
    code = FAKE_SERVER.replace("import http.server", "import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN)\nimport http.server")
    pids = tmp_path / "pids"
    spec = LaunchSpec([sys.executable, "-c", code, str(port), str(pids)], f"http://127.0.0.1:{port}",
                      ready_timeout_s=20, stop_timeout_s=1)
    with ServerProcess(spec) as srv:
        grandchild = int(pids.read_text())
        t0 = time.monotonic()  # the stop only: a loaded host's slow start is no part of the contract
    assert _wait_gone([srv.pid, grandchild])
    assert time.monotonic() - t0 < 15  # SIGKILL after stop_timeout_s = 1 s; without it the group never goes


@pytest.mark.live
def test_a_server_that_exits_shows_its_log_tail(tmp_path):
    spec = LaunchSpec([sys.executable, "-c", "print('cannot bind: port in use'); raise SystemExit(3)"],
                      f"http://127.0.0.1:{free_port()}", ready_timeout_s=20)
    with pytest.raises(ServerStartError) as e:
        with ServerProcess(spec):
            pass
    assert "status 3" in str(e.value) and "cannot bind: port in use" in str(e.value)


@pytest.mark.live
def test_a_server_that_never_gets_ready_times_out_with_its_log_tail(tmp_path):
    spec = LaunchSpec([sys.executable, "-c", "import time; print('loading weights...', flush=True); time.sleep(600)"],
                      f"http://127.0.0.1:{free_port()}", ready_timeout_s=1.5, stop_timeout_s=2)
    srv = ServerProcess(spec)
    launch = srv.start

    def start_and_wait_for_the_line():
        # The premise, independent of the host's speed: the child has printed its line before the
        # ready timeout (counted from wait_ready) starts. A loaded host once let 1.5 s pass before
        # the child's Python got that far. 60 s is a hang's limit, never a slow host's.
        launch()
        deadline = time.monotonic() + 60
        while "loading weights..." not in srv.tail_text() and time.monotonic() < deadline:
            time.sleep(0.05)

    srv.start = start_and_wait_for_the_line  # what `with srv:` calls before wait_ready
    with pytest.raises(ServerStartError) as e:
        with srv:
            pass
    assert "not ready" in str(e.value) and "loading weights..." in str(e.value)
    assert _wait_gone([srv.pid])


@pytest.mark.live
def test_a_missing_command_is_a_clear_error():
    spec = LaunchSpec(["/nonexistent/vllm", "serve"], "http://127.0.0.1:1")
    with pytest.raises(ServerStartError, match="cannot start /nonexistent/vllm"):
        with ServerProcess(spec):
            pass


@pytest.mark.live
def test_a_killed_harness_leaves_no_server_behind(tmp_path):
    """SIGKILL the harness itself (no cleanup code runs): the server still goes (PDEATHSIG)."""
    pids = tmp_path / "pids"
    harness = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(Path(__file__).resolve().parent.parent)!r})
        from harness.backends.live.lifecycle import LaunchSpec, ServerProcess, free_port
        port = free_port()
        spec = LaunchSpec([sys.executable, "-c", {FAKE_SERVER!r}, str(port), {str(pids)!r}], f"http://127.0.0.1:{{port}}")
        with ServerProcess(spec) as srv:
            print(srv.pid, flush=True)
            time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", harness], stdout=subprocess.PIPE, text=True)
    leader = int(proc.stdout.readline())
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert _wait_gone([leader])
    # The grandchild's parent (the server) died by SIGTERM, whose default action skips cleanup;
    # a real server forwards the signal to its workers. Ours leaves one: reap it here.
    grandchild = int(pids.read_text())
    if _alive(grandchild):
        os.kill(grandchild, signal.SIGKILL)


def test_free_port_is_bindable():
    import socket

    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
