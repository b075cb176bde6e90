"""Disk and permission faults of the results store, on real filesystems: a results directory
under a file or read-only is refused before the run (one line, exit 2, nothing written); a disk
that fills during the run breaks it (one line, exit 3), and however full the disk, the broken run
leaves its reason (FAILED.txt, written into room claimed when the run started), which the next
run names. Full disks are small tmpfs mounts in a user namespace (`unshare -rm`), or, where the
machine allows none, the kernel's per-process file size limit (RLIMIT_FSIZE: writes fail with
EFBIG), a real write error all the same."""
from __future__ import annotations

import os
import resource
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from harness.results.claim import FAILED_FILE, RESERVED_BYTES, RUNNING_FILE
from harness.results.store import broken_runs
from tests.test_plan import GRID, SMALL

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENT = "yi34b_tp2_strict"
RUN = [sys.executable, "-m", "harness", f"experiment={EXPERIMENT}", "scheduler=[sarathi]", "search.num_requests=64",
       "progress=false"]


def _can_mount() -> bool:
    if not shutil.which("unshare"):
        return False
    p = subprocess.run(["unshare", "-rm", "sh", "-c", "d=$(mktemp -d) && mount -t tmpfs -o size=64k tmpfs $d"],
                       capture_output=True)
    return p.returncode == 0


CAN_MOUNT = _can_mount()
FAULTS = ["tmpfs", "fsize"]


def _on_a_small_disk(tmp_path: Path, free_bytes: int, runs: list[list[str]]) -> list[tuple[int, str, str]]:
    """Each command of `runs` (a harness run's words) in turn with results_dir on a fresh 1 MiB
    tmpfs holding `free_bytes` free at the first; the disk is emptied of its filler before the
    second. Returns (exit status, stdout, stderr) each, and leaves a copy of the disk after the
    first run in tmp_path/after."""
    disk, out = tmp_path / "disk", tmp_path / "out"
    disk.mkdir()
    out.mkdir()
    lines = ["set -u", f"mount -t tmpfs -o size=1m tmpfs {disk}",
             f"head -c {(1 << 20) - free_bytes} /dev/zero > {disk}/filler"]
    for i, words in enumerate(runs):
        cmd = " ".join(shlex.quote(w) for w in [*RUN, *words, f"results_dir={disk}"])
        lines.append(f"{cmd} > {out}/{i}.out 2> {out}/{i}.err; echo $? > {out}/{i}.rc")
        if i == 0:
            lines += [f"rm {disk}/filler", f"cp -a {disk} {tmp_path}/after"]
    subprocess.run(["unshare", "-rm", "sh", "-c", "\n".join(lines)], cwd=ROOT, check=True, timeout=600)
    return [(int((out / f"{i}.rc").read_text()), (out / f"{i}.out").read_text(), (out / f"{i}.err").read_text())
            for i in range(len(runs))]


def _with_file_size_limit(tmp_path: Path, limit: int, runs: list[list[str]]) -> list[tuple[int, str, str]]:
    """As _on_a_small_disk, the first run with no file over `limit` bytes (RLIMIT_FSIZE)."""
    results, done = tmp_path / "results", []
    for i, words in enumerate(runs):
        limited = (lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))) if i == 0 else None
        p = subprocess.run([*RUN, *words, f"results_dir={results}"], cwd=ROOT, capture_output=True, text=True,
                           timeout=300, preexec_fn=limited)
        done.append((p.returncode, p.stdout, p.stderr))
        if i == 0:
            shutil.copytree(results, tmp_path / "after")
    return done


def _fault(kind: str, tmp_path: Path, runs: list[list[str]]) -> tuple[list[tuple[int, str, str]], str]:
    """The runs under a disk fault of `kind`; and the words the system uses for it."""
    if kind == "tmpfs":
        if not CAN_MOUNT:
            pytest.skip("no user namespace with tmpfs mounts here (unshare -rm); the fsize case covers it")
        # Room for the claimed failure record and a little more: not for a probe, nor a run's results.
        return _on_a_small_disk(tmp_path, 3 * RESERVED_BYTES, runs), "No space left on device"
    return _with_file_size_limit(tmp_path, RESERVED_BYTES + 2048, runs), "File too large"


def _one_line_and_status(rc: int, err: str, status: int) -> str:
    assert rc == status and "Traceback" not in err, (rc, err[-3000:])
    (line,) = [x for x in err.splitlines() if x.startswith("error:")]
    return line


@pytest.mark.parametrize("kind", FAULTS)
@pytest.mark.parametrize("where, words", [("the probe cache", []), ("saving the results", ["cache=false"])])
def test_a_disk_that_fills_breaks_the_run_and_its_reason_survives(tmp_path, kind, where, words):
    (first, second), why = _fault(kind, tmp_path, [words, ["search.fixed_qps=1"]])
    rc, out, err = first
    line = _one_line_and_status(rc, err, 3)
    assert "the run broke" in line and where in line and why in line, line
    assert "results:" not in out
    runs = list((tmp_path / "after" / EXPERIMENT).iterdir())
    (partial,) = [d for d in runs if d.name.endswith(".partial")]
    assert not [d for d in runs if not d.name.startswith(".")]  # nothing that reads as a finished run
    reason = (partial / FAILED_FILE).read_text()
    assert where in reason and why in reason, reason
    assert not (partial / RUNNING_FILE).exists()
    assert not [f for f in partial.iterdir() if f.name.endswith(".tmp")]  # no half-written file
    # The next run, with room again, names the broken one and its reason.
    rc, out, err = second
    assert rc == 0, err[-3000:]
    assert f"an earlier run of {EXPERIMENT} broke ({where}" in out, out


@pytest.mark.skipif(not CAN_MOUNT, reason="no user namespace with tmpfs mounts here (unshare -rm)")
def test_a_disk_without_room_for_a_failure_record_is_refused_before_the_run(tmp_path):
    ((rc, out, err),) = _on_a_small_disk(tmp_path, 0, [[]])
    line = _one_line_and_status(rc, err, 2)
    assert "results_dir: cannot write" in line and "No space left on device" in line, line
    assert not list((tmp_path / "after" / EXPERIMENT).iterdir())  # its claim given back


FILL_THEN_FAIL = """
import sys
import pandas as pd
from harness.results.store import RunWriter
writer = RunWriter(sys.argv[1], "x")
with open(sys.argv[1] + "/filler", "wb", buffering=0) as f:  # another writer takes every block left
    try:
        while True:
            f.write(bytes(4096))
    except OSError:
        pass
print(writer.fail("the probe at 2 QPS broke", "seed: 0\\n", {"status": "broken"}, pd.DataFrame({"x": range(5000)})))
"""


@pytest.mark.skipif(not CAN_MOUNT, reason="no user namespace with tmpfs mounts here (unshare -rm)")
def test_the_reason_survives_a_disk_another_writer_filled(tmp_path):
    """The run's own writes may free what they took when they fail; another process's do not:
    with the disk full to the last block, the reason still goes into the room claimed for it."""
    disk = tmp_path / "disk"
    disk.mkdir()
    script = (f"mount -t tmpfs -o size=256k tmpfs {disk} && {shlex.quote(sys.executable)} -c "
              f"{shlex.quote(FILL_THEN_FAIL)} {disk} && cp -a {disk} {tmp_path}/after && rm -r {tmp_path}/after/filler")
    p = subprocess.run(["unshare", "-rm", "sh", "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "config.yaml: No space left on device" in p.stdout, p.stdout  # the disk was full: nothing else fit
    (partial,) = (tmp_path / "after" / "x").iterdir()
    assert (partial / FAILED_FILE).read_text() == "the probe at 2 QPS broke\n"
    assert sorted(f.name for f in partial.iterdir()) == [FAILED_FILE]


def _read_only(results: Path) -> list[str]:
    """The command prefix that runs a harness with `results` read-only (a read-only bind mount
    as root, whom permissions do not stop; file permissions otherwise)."""
    results.mkdir()
    if os.geteuid() != 0:
        results.chmod(0o555)
        return []
    if not CAN_MOUNT:
        pytest.skip("root without user namespaces: nothing makes a directory read-only for it")
    mount = f"mount --bind {results} {results} && mount -o remount,bind,ro {results} && exec \"$@\""
    return ["unshare", "-rm", "sh", "-c", mount, "sh"]


@pytest.mark.parametrize("case", ["under a file", "read-only"])
def test_a_results_dir_that_cannot_be_written_is_refused_before_the_run(tmp_path, case):
    if case == "under a file":
        (tmp_path / "a-file").write_text("")
        prefix, results = [], tmp_path / "a-file" / "results"
    else:
        results = tmp_path / "results"
        prefix = _read_only(results)
    p = subprocess.run([*prefix, *RUN, f"results_dir={results}"], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    line = _one_line_and_status(p.returncode, p.stderr, 2)
    assert f"results_dir: cannot write {results}" in line, line
    assert ("Not a directory" if case == "under a file" else "Read-only file system" if prefix
            else "Permission denied") in line, line
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_a_run_killed_before_it_could_say_why_is_named_by_the_next(tmp_path):
    claim = ("import sys, time; from harness.results.store import RunWriter; "
             "print(RunWriter(sys.argv[1], 'x').partial, flush=True); time.sleep(300)")
    proc = subprocess.Popen([sys.executable, "-c", claim, str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    partial = Path(proc.stdout.readline().strip())
    assert broken_runs(tmp_path, "x") == []  # running: not broken
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    ((where, reason),) = broken_runs(tmp_path, "x")
    assert where == partial and reason.startswith(f"killed before it could say why (pid {proc.pid} on "), reason


PLAN = [sys.executable, "-m", "harness", "plan", *SMALL, *GRID, "target_qps=10"]


def test_a_plan_that_cannot_be_written_is_refused_before_its_search(tmp_path):
    (tmp_path / "a-file").write_text("")
    p = subprocess.run([*PLAN, f"plan.out={tmp_path / 'a-file' / 'plan'}"], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    line = _one_line_and_status(p.returncode, p.stderr, 2)
    assert "plan.out: cannot write" in line and "Not a directory" in line, line
    assert "screened" not in p.stdout + p.stderr  # it used to search for minutes, then crash


def test_a_plan_the_disk_refuses_breaks_and_keeps_its_reason(tmp_path):
    out = tmp_path / "plan"
    limit = RESERVED_BYTES + 2048  # the plan's figure and record are larger
    p = subprocess.run([*PLAN, f"plan.out={out}"], cwd=ROOT, capture_output=True, text=True, timeout=600,
                       preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))
    line = _one_line_and_status(p.returncode, p.stderr, 3)
    assert "saving the plan: cannot write" in line and "File too large" in line, line
    assert not out.exists() and "plan: " not in p.stdout
    reason = (tmp_path / f".{out.name}.partial" / FAILED_FILE).read_text()
    assert reason.startswith("saving the plan: cannot write") and not (tmp_path / f".{out.name}.partial" / RUNNING_FILE).exists()
