"""A directory being written (a run's, a plan's), claimed before the work that fills it, so that
however the work ends, the directory says how.

Work goes to a hidden `.NAME.partial` directory, renamed to NAME when complete (`finish`), so
broken work never looks finished. Claiming it (`make_room`) writes RUNNING.txt: the process, and
a few kilobytes synced to disk, room taken while the disk still has some. Work that breaks
(`record_failure`) overwrites that room in place with its reason and renames it FAILED.txt,
neither of which needs a free block, before it tries to save anything else: a disk that filled,
by this process or another, cannot take the reason away. Work killed before it could say why
leaves RUNNING.txt, naming its process (`broken`). A place that cannot be written at the start is
bad input (HarnessError: exit 2, nothing run); a write that fails during the work breaks it
(RunBroken: exit 3).
"""
from __future__ import annotations

import os
import shutil
import socket
import time
import uuid
from pathlib import Path

from common.errors import HarnessError, RunBroken

FAILED_FILE = "FAILED.txt"  # in a partial directory: why the work broke
RUNNING_FILE = "RUNNING.txt"  # in a partial directory: its process, and the room for FAILED.txt
RESERVED_BYTES = 4096  # a reason longer than this is cut to it (reasons are one line)


def unwritable(path: Path, e: OSError) -> str:
    """One line: which path could not be written, and the system's reason."""
    return f"cannot write {path}: {why(e)}"


def why(e: OSError) -> str:
    """The system's words for an errno (pyarrow wraps them in its own), else the message."""
    return os.strerror(e.errno) if e.errno else str(e)


def atomic_write(path: Path, write) -> None:
    """`write(tmp)` then rename onto `path`: a reader never sees half a file, a failed write
    leaves none (and gives its blocks back). A name of its own per writer: two runs may save the
    same file at once."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def make_room(partial: Path, what: str) -> None:
    """RUNNING.txt in the just-made `partial`: who works, padded to RESERVED_BYTES and synced so
    the blocks are the file's. HarnessError naming `what` (the setting that chose the place), the
    directory removed, when the disk has not even that."""
    note = (f"pid {os.getpid()} on {socket.gethostname()}, started {time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n"
            "(work that left this file and is not running any more was killed before it could say why)\n")
    try:
        with open(partial / RUNNING_FILE, "wb") as f:
            f.write(note.encode().ljust(RESERVED_BYTES, b" "))
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        discard(partial)
        raise HarnessError(f"{what}: {unwritable(partial / RUNNING_FILE, e)} "
                           "(no room even for the record of a failure)") from None


def record_failure(partial: Path, reason: str) -> OSError | None:
    """The reason (one line) into RUNNING.txt's claimed bytes, renamed FAILED.txt; never raises
    for the disk: returns its error when even that failed."""
    data = (reason.rstrip() + "\n").encode()[:RESERVED_BYTES]
    running = partial / RUNNING_FILE
    try:
        if not running.exists():  # not claimed by this code (an older version's directory): a plain write
            (partial / FAILED_FILE).write_bytes(data)
            return None
        with open(running, "r+b") as f:
            f.write(data)
            f.truncate(len(data))
        os.replace(running, partial / FAILED_FILE)
    except OSError as e:
        return e
    return None


def finish(partial: Path, final: Path, what: str) -> Path:
    """The work complete: RUNNING.txt gone, `partial` renamed `final`; RunBroken if refused."""
    try:
        (partial / RUNNING_FILE).unlink()
        os.rename(partial, final)
    except OSError as e:
        raise RunBroken(f"{what}: {unwritable(final, e)}") from None
    return final


def discard(partial: Path) -> None:
    """Give the claimed directory back (nothing was done)."""
    shutil.rmtree(partial, ignore_errors=True)


def broken(base: Path) -> list[tuple[Path, str]]:
    """The partial directories under `base` of work that broke, newest first, with their reasons:
    FAILED.txt's, or, where work of this host was killed before it could write one, that."""
    try:
        partials = list(base.glob(".*.partial")) if base.is_dir() else []
    except OSError:
        return []
    found = [(d, reason) for d in partials if (reason := _read(d / FAILED_FILE) or _killed(_read(d / RUNNING_FILE)))]
    return sorted(found, key=lambda x: x[0].name, reverse=True)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace") if path.is_file() else None
    except OSError:
        return None


def _killed(running: str | None) -> str | None:
    """RUNNING.txt's process, if it ran on this host and is gone: the work was killed."""
    words = (running or "").split()
    if len(words) < 4 or words[0] != "pid" or not words[1].isdigit() or words[3].rstrip(",") != socket.gethostname():
        return None
    try:
        os.kill(int(words[1]), 0)
        return None  # still running (or the pid was reused: then it says nothing, as before)
    except ProcessLookupError:
        return f"killed before it could say why ({running.splitlines()[0]})"
    except OSError:
        return None
