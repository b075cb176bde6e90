"""Running `python -m harness` as a user would, for tests of what it refuses."""
from __future__ import annotations

import contextlib
import io
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
    `message`, and writes nothing. Run in-process through the entry point's own `main` (what
    `python -m harness` calls, harness/__main__.py), which saves each case a Python start-up and
    the config's imports: a refusal comes before any work, and a traceback fails the test alike."""
    from harness.commands.main import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([*args, f"results_dir={tmp_path}"])
    assert code == 2, (out.getvalue(), err.getvalue())
    assert message in err.getvalue() and len(err.getvalue().strip().splitlines()) == 1, err.getvalue()
    assert not any(tmp_path.iterdir())


def kill_mid_run(proc: subprocess.Popen, pid_of: Callable[[], int]) -> tuple[str, str, float]:
    """Once a live run's warm-up is done and its 30 s probe under way (3 s), SIGKILL the server
    `pid_of()` names; returns the run's stdout, stderr and the seconds it took to stop after."""
    time.sleep(3.0)
    os.kill(pid_of(), signal.SIGKILL)
    killed = time.monotonic()
    out, err = proc.communicate(timeout=60)
    return out, err, time.monotonic() - killed


def run_while_progressing(args: list[str], quiet_s: float, **popen) -> subprocess.CompletedProcess:
    """Run `args` to its end however long it takes, as long as it makes progress: a new line on
    stdout within every `quiet_s` seconds (a job finished, a probe done). A fixed wall-clock limit
    fails a slow run on a busy host; this one only fails a run that stopped moving (its process
    group is killed and the test fails, naming the last line). Returns what
    subprocess.run(capture_output=True, text=True) would."""
    import queue
    import threading

    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, **popen)
    lines: queue.Queue[str | None] = queue.Queue()
    err: list[str] = []
    stderr_reader = threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True)
    stderr_reader.start()

    def pump() -> None:
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    out: list[str] = []
    while True:
        try:
            line = lines.get(timeout=quiet_s)
        except queue.Empty:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            last = out[-1].strip() if out else "(nothing printed)"
            raise AssertionError(f"{' '.join(args[:4])} ...: no progress in {quiet_s:.0f} s; its last line: {last}")
        if line is None:
            break
        out.append(line)
    proc.wait()
    stderr_reader.join()
    return subprocess.CompletedProcess(args, proc.returncode, "".join(out), "".join(err))
