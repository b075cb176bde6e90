"""Start a server process, wait until it serves, stop it and everything it spawned.

    with ServerProcess(LaunchSpec(command=[...], base_url=f"http://127.0.0.1:{port}", model="tiny")) as srv:
        ...  # srv.base_url answers /health and has served one warm-up request

The server runs in its own session, hence its own process group (vLLM forks engine-core workers;
they join the group), and stopping it signals the whole group: SIGTERM, a grace period, then
SIGKILL for whatever is left. Stopping happens on leaving the `with` block for any reason
(normal exit, an exception, Ctrl-C's KeyboardInterrupt), from an atexit hook if the interpreter
exits with a server still up, and, while a server runs, a SIGTERM to the harness is turned into
SystemExit so that the same cleanup runs. The direct child also gets PR_SET_PDEATHSIG, so even
a SIGKILLed harness does not leave the server serving. Readiness: GET /health must answer 200
before `ready_timeout_s`; if the process exits or the time runs out, the error carries the tail
of its log. Then one small completion warms it up (vLLM in eager mode has no warm-up of its own,
and the first request of any server pays for lazy initialisation).
"""
from __future__ import annotations

import atexit
import ctypes
import json
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from common.errors import HarnessError
from harness.loadgen.run import auth_headers

_LIVE_GROUPS: set[int] = set()
_PR_SET_PDEATHSIG = 1


class ServerStartError(HarnessError):
    pass


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on right now (the OS picks; a race with another process is possible
    but unlikely, and a server that then fails to bind shows it in the log tail)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class LaunchSpec:
    command: Sequence[str]
    base_url: str  # where the server will listen, e.g. http://127.0.0.1:8123
    model: str | None = None  # for the warm-up request; None skips it
    env: Mapping[str, str] = field(default_factory=dict)  # added to the harness's environment
    cwd: str | None = None
    ready_timeout_s: float = 120.0
    stop_timeout_s: float = 15.0
    log_path: str | None = None  # default: a temporary file, kept after exit for inspection
    warmup_prompt: tuple[int, ...] = (10, 11, 12, 13, 14, 15, 16, 17)
    warmup_max_tokens: int = 2
    api_key: str | None = field(default=None, repr=False)  # the server's key, for the warm-up request


def _kill_group(pgid: int, sig: int) -> bool:
    """Signal a process group; False if it no longer exists."""
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # a member we may not signal is still alive


def _group_alive(pgid: int) -> bool:
    """Does the group have a member that is not a zombie? Zombies (dead, not yet reaped by
    whoever inherited them) still answer killpg(pgid, 0); on Linux /proc tells them apart."""
    if not _kill_group(pgid, 0):
        return False
    proc = Path("/proc")
    if not proc.is_dir():
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # /proc/PID/stat: "pid (comm) state ppid pgrp ..."; comm may hold spaces or parens.
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def _reap_all() -> None:
    for pgid in list(_LIVE_GROUPS):
        _kill_group(pgid, signal.SIGKILL)
        _LIVE_GROUPS.discard(pgid)


atexit.register(_reap_all)


def _die_with_parent() -> None:
    # Runs in the child between fork and exec: ask the kernel to SIGTERM it when we die.
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except Exception:
        pass


def _healthy(url: str) -> bool:
    """`url` (a server's /health) answered 200 within 2 s."""
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return False


def _sigterm_to_exit(signum, frame):
    raise SystemExit(128 + signum)


class ServerProcess:
    def __init__(self, spec: LaunchSpec) -> None:
        self.spec = spec
        self.base_url = spec.base_url.rstrip("/")
        self.proc: subprocess.Popen | None = None
        self.log_path = Path(spec.log_path) if spec.log_path else None
        self._old_sigterm = None

    # -- context manager -----------------------------------------------------------------
    def __enter__(self) -> ServerProcess:
        self.start()
        try:
            self.wait_ready()
            if self.spec.model is not None:
                self.warm_up()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- steps ---------------------------------------------------------------------------
    def start(self) -> None:
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix="server-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **{k: str(v) for k, v in self.spec.env.items()}}
        main_thread = threading.current_thread() is threading.main_thread()
        if main_thread and signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
            self._old_sigterm = signal.signal(signal.SIGTERM, _sigterm_to_exit)
        with open(self.log_path, "ab") as log:
            try:
                self.proc = subprocess.Popen(
                    list(self.spec.command), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    env=env, cwd=self.spec.cwd, start_new_session=True,
                    # PDEATHSIG fires when the forking *thread* exits: only safe from the main thread.
                    preexec_fn=_die_with_parent if main_thread else None,
                )
            except OSError as e:
                self._restore_sigterm()
                raise ServerStartError(f"cannot start {' '.join(self.spec.command)}: {e}") from None
        _LIVE_GROUPS.add(self.proc.pid)

    def wait_ready(self) -> None:
        deadline = time.monotonic() + self.spec.ready_timeout_s
        url = self.base_url + "/health"
        while True:
            code = self.proc.poll()
            if code is not None:
                raise ServerStartError(f"server exited with status {code} before it was ready\n{self.tail_text()}")
            if _healthy(url):
                return
            if time.monotonic() > deadline:
                raise ServerStartError(
                    f"server not ready at {url} after {self.spec.ready_timeout_s:g} s\n{self.tail_text()}")
            time.sleep(0.2)

    def warm_up(self) -> None:
        body = json.dumps({"model": self.spec.model, "prompt": list(self.spec.warmup_prompt),
                           "max_tokens": self.spec.warmup_max_tokens, "temperature": 0.0}).encode()
        headers = {"Content-Type": "application/json", **auth_headers(self.spec.api_key)}
        req = urllib.request.Request(self.base_url + "/v1/completions", data=body, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.spec.ready_timeout_s) as r:
                r.read()
        except urllib.error.HTTPError as e:
            raise ServerStartError(f"warm-up request failed: HTTP {e.code}: {e.read()[:300]!r}\n{self.tail_text()}") from None
        except (urllib.error.URLError, OSError) as e:
            raise ServerStartError(f"warm-up request failed: {e}\n{self.tail_text()}") from None

    def stop(self) -> None:
        """SIGTERM the group, wait up to stop_timeout_s for every member, then SIGKILL the rest."""
        if self.proc is None:
            return
        pgid = self.proc.pid
        try:
            if _kill_group(pgid, signal.SIGTERM):
                deadline = time.monotonic() + self.spec.stop_timeout_s
                while time.monotonic() < deadline:
                    self.proc.poll()  # reap the leader so the group can empty
                    if not _group_alive(pgid):
                        break
                    time.sleep(0.05)
                else:
                    _kill_group(pgid, signal.SIGKILL)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                _kill_group(pgid, signal.SIGKILL)
                self.proc.wait()
        finally:
            _LIVE_GROUPS.discard(pgid)
            self._restore_sigterm()

    # -- diagnostics ---------------------------------------------------------------------
    def tail_text(self, lines: int = 40) -> str:
        """The log's last `lines` (of its last 64 KiB), under a line naming the file."""
        text = ""
        if self.log_path is not None and self.log_path.exists():
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 64 * 1024))
                text = f.read().decode(errors="replace")
        return f"--- last lines of {self.log_path} ---\n" + "\n".join(text.splitlines()[-lines:])

    def _restore_sigterm(self) -> None:
        if self._old_sigterm is not None:
            signal.signal(signal.SIGTERM, self._old_sigterm)
            self._old_sigterm = None

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid


class HealthWatch:
    """Polls a server's /health from a thread of its own (never from the client's event loop) and
    says when it has not answered 200 for `window_s`: a server that hangs, not only one that exits.
    A busy server answers slowly, so the window is seconds long and each poll waits up to 2 s."""

    def __init__(self, base_url: str, window_s: float, interval_s: float = 0.5) -> None:
        self.url = base_url.rstrip("/") + "/health"
        self.window_s, self.interval_s = window_s, interval_s
        self.last_ok = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="health-watch", daemon=True)

    def __enter__(self) -> HealthWatch:
        if self.window_s > 0:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            if _healthy(self.url):
                self.last_ok = time.monotonic()

    def problem(self) -> str | None:
        """Why the server cannot be measured any more, or None."""
        silent = time.monotonic() - self.last_ok
        if self.window_s > 0 and silent > self.window_s:
            return f"/health unanswered for {silent:.1f} s (the limit is {self.window_s:g} s)"
        return None
