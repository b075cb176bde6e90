"""Running `python -m harness` as a user would, for tests of what it refuses."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def assert_refused(tmp_path: Path, args: list[str], message: str) -> None:
    """`python -m harness ARGS results_dir=tmp_path` exits 2 with one line on stderr holding
    `message`, and writes nothing."""
    p = subprocess.run([sys.executable, "-m", "harness", *args, f"results_dir={tmp_path}"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert message in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not any(tmp_path.iterdir())


def kill_mid_run(proc: subprocess.Popen, pid_of: Callable[[], int]) -> tuple[str, str, float]:
    """Once a live run's warm-up is done and its 30 s probe under way (3 s), SIGKILL the server
    `pid_of()` names; returns the run's stdout, stderr and the seconds it took to stop after."""
    time.sleep(3.0)
    os.kill(pid_of(), signal.SIGKILL)
    killed = time.monotonic()
    out, err = proc.communicate(timeout=60)
    return out, err, time.monotonic() - killed
