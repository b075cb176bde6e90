"""The results store: one directory per run, written atomically.

results/<experiment>/<timestamp>/
  config.yaml          the fully resolved config
  summary.json         capacities, every probe's verdict and metrics, provenance (git, versions,
                       seed, the host it ran on)
  requests.parquet     one row per request per probe (scalar per-request metrics)
  token_times.parquet  token times of every request of each scheduler's capacity probe

Files go to a hidden `.<timestamp>.partial` directory that is renamed when complete, so a
crashed or interrupted run never looks like a finished one; a run that breaks leaves its reason
there (FAILED.txt), however full the disk (harness/results/claim.py).
"""
from __future__ import annotations

import hashlib
import json
import socket
import subprocess
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

import numpy as np
import pandas as pd

from common.errors import HarnessError, RunBroken
from harness.metrics import TokenGaps
from harness.records import RequestRecord, error_kind
from harness.results.claim import (FAILED_FILE, atomic_write, broken, discard, finish, make_room, record_failure,
                                   unwritable, why)

PACKAGES = ("numpy", "pandas", "pyarrow", "hydra-core", "sarathi-harness")


def _git(args: list[str], cwd: Path) -> bytes:
    return subprocess.run(["git", *args], capture_output=True, timeout=10, cwd=cwd).stdout


def worktree_changes(cwd: Path = Path(__file__).parent) -> str | None:
    """A digest of what the checkout at `cwd` changes against its commit (tracked files' diff, and
    untracked files not ignored), None when it changes nothing or is no checkout: results of edited
    code must not pass for the commit's (the probe cache keys on it)."""
    try:
        top = _git(["rev-parse", "--show-toplevel"], cwd).decode().strip()
        if not top:
            return None
        top = Path(top)
        diff = _git(["diff", "HEAD", "--binary"], top)
        others = [n for n in _git(["ls-files", "--others", "--exclude-standard", "-z"], top).split(b"\0") if n]
    except (OSError, subprocess.SubprocessError):
        return None
    if not diff and not others:
        return None
    h = hashlib.sha256(diff)
    for name in sorted(others):
        f = top / name.decode(errors="replace")
        h.update(name + b"\0" + (f.read_bytes() if f.is_file() and f.stat().st_size < 2**20 else str(f.stat().st_size).encode()))
    return h.hexdigest()[:16]


def provenance() -> dict:
    try:
        commit = _git(["rev-parse", "HEAD"], Path(__file__).parent).decode().strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    versions = {}
    for p in PACKAGES:
        try:
            versions[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            versions[p] = None
    return {"git_commit": commit, "git_changes": worktree_changes(), "versions": versions,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "host": socket.gethostname()}  # where it ran (a cluster's job runs anywhere)


def records_frame(records: Sequence[RequestRecord], gaps: TokenGaps | None = None, **columns) -> pd.DataFrame:
    """Scalar per-request columns (token times summarized), plus constant `columns` (scheduler, qps)."""
    gaps = TokenGaps.of(records) if gaps is None else gaps.check(records)
    def field(*names: str) -> dict[str, list]:
        return {n: [getattr(r, n) for r in records] for n in names}

    return _leading(pd.DataFrame({
        **field("request_id", "arrival_s", "prompt_len", "output_len", "dispatched_s", "first_scheduled_s",
                "first_token_s", "finished_s"),
        "num_tokens": [len(r.token_times_s) for r in records], "tbt_max_s": gaps.max.tolist(),
        **field("num_preemptions", "cached_tokens", "error"), "error_kind": [error_kind(r.error) for r in records],
    }), columns)


def token_frame(records: Sequence[RequestRecord], **columns) -> pd.DataFrame:
    return _leading(pd.DataFrame({"request_id": [r.request_id for r in records],
                                  "token_times_s": [r.token_times_s.tolist() for r in records]}), columns)


def _leading(df: pd.DataFrame, columns: dict) -> pd.DataFrame:
    """`df` with constant `columns` (scheduler, qps) first, in their order."""
    for i, (k, v) in enumerate(columns.items()):
        df.insert(i, k, v)
    return df


class RunWriter:
    """Claims the run's directory when created: `.<stamp>[-n].partial`, made with an exclusive
    mkdir, so two runs started in the same second never share it, with room for its failure
    record (claim.py). `write` fills it and renames it to `<stamp>[-n]`; `fail` leaves it partial
    with the reason and what was measured."""

    def __init__(self, results_dir: str | Path, experiment: str) -> None:
        base = Path(results_dir) / experiment
        try:
            base.mkdir(parents=True, exist_ok=True)
            self.final, self.partial = _claim(base)
        except OSError as e:
            raise HarnessError(f"results_dir: {unwritable(Path(e.filename or base), e)}") from None
        make_room(self.partial, "results_dir")

    def write(self, config_yaml: str, summary: dict, requests: pd.DataFrame, tokens: pd.DataFrame) -> Path:
        """The finished run; RunBroken (the directory left partial) if the disk refuses it."""
        unsaved = self._fill(config_yaml, summary, requests, tokens)
        if unsaved:
            name, e = next(iter(unsaved.items()))
            raise RunBroken(f"saving the results: {unwritable(self.partial / name, e)}")
        return finish(self.partial, self.final, "saving the results")

    def fail(self, reason: str, config_yaml: str, summary: dict | None = None,
             requests: pd.DataFrame | None = None) -> str:
        """Keep the directory partial (never read as a result): the reason first, into the room
        claimed for it, then what was measured, as far as the disk takes it. Never raises for the
        disk: returns what it could not save, with why ("" when it saved everything)."""
        unsaved = {}
        e = record_failure(self.partial, reason)
        if e is not None:
            unsaved[FAILED_FILE] = e
        unsaved.update(self._fill(config_yaml, summary, requests, None))
        return ", ".join(f"{name}: {why(e)}" for name, e in unsaved.items())

    def discard(self) -> None:
        """Give the claimed directory back (nothing was measured)."""
        discard(self.partial)

    def _fill(self, config_yaml: str, summary: dict | None, requests: pd.DataFrame | None,
              tokens: pd.DataFrame | None) -> dict[str, OSError]:
        """Every file that has a value, each whole or not at all; those that failed, and why."""
        files = {"config.yaml": lambda p: p.write_text(config_yaml)}
        if summary is not None:
            text = json.dumps(summary, indent=2, default=_json_default) + "\n"
            files["summary.json"] = lambda p: p.write_text(text)
        if requests is not None:
            files["requests.parquet"] = lambda p: requests.to_parquet(p, index=False)
        if tokens is not None:
            files["token_times.parquet"] = lambda p: tokens.to_parquet(p, index=False)
        unsaved = {}
        for name, write in files.items():
            try:
                atomic_write(self.partial / name, write)
            except OSError as e:
                unsaved[name] = e
        return unsaved


def _claim(base: Path) -> tuple[Path, Path]:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    n = 0
    while True:
        name = stamp if n == 0 else f"{stamp}-{n}"
        final, partial = base / name, base / f".{name}.partial"
        n += 1
        if final.exists():
            continue
        try:
            partial.mkdir()
        except FileExistsError:
            continue
        if final.exists():  # another run finished under this name between the check and the claim
            partial.rmdir()
            continue
        return final, partial


def broken_reason(e: BaseException) -> str:
    """What a broken run's FAILED.txt says."""
    return str(e) if isinstance(e, RunBroken) else "interrupted" if isinstance(e, KeyboardInterrupt) else f"{type(e).__name__}: {e}"


def broken_runs(results_dir: str | Path, experiment: str) -> list[tuple[Path, str]]:
    """Partial run directories of `experiment` that broke, newest first, with their reasons."""
    return broken(Path(results_dir) / experiment)


def _json_default(o):
    if isinstance(o, (np.integer, np.floating)):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serializable: {type(o).__name__}")
