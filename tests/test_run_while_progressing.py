"""tests.cli.run_while_progressing: the timeout of long subprocesses (the nightly run) follows
their progress, not a fixed wall clock."""
from __future__ import annotations

import os
import sys
import time

import pytest

from tests.cli import run_while_progressing


def test_a_run_that_keeps_printing_returns_like_subprocess_run():
    code = "import sys, time\nfor i in range(3):\n    print(i, flush=True); time.sleep(0.2)\nprint('bad', file=sys.stderr); sys.exit(3)"
    p = run_while_progressing([sys.executable, "-c", code], quiet_s=120)
    assert (p.returncode, p.stdout, p.stderr) == (3, "0\n1\n2\n", "bad\n")


def test_a_run_that_stops_printing_is_killed_with_its_children(tmp_path):
    pid_file = tmp_path / "child.pid"
    # a shell that starts a sleeping child, says so, then waits on it: silent from then on
    code = f"sleep 600 & echo $! > {pid_file}; echo started; wait"
    t0 = time.monotonic()
    with pytest.raises(AssertionError, match="no progress in 3 s; its last line: started"):
        run_while_progressing(["sh", "-c", code], quiet_s=3)
    assert time.monotonic() - t0 < 300  # not the child's 600 s
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 30
    while _alive(child) and time.monotonic() < deadline:  # SIGKILL is delivered, then reaped by init
        time.sleep(0.1)
    assert not _alive(child)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = open(f"/proc/{pid}/stat").read().split(")")[-1].split()[0] if os.path.exists(f"/proc/{pid}/stat") else "X"
    return status != "Z"  # a zombie is dead, only not yet reaped
