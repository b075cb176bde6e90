"""Checks before anything is submitted through submitit: the SLURM partition exists and its nodes
can hold every job (sinfo), or, for submitit's local executor, this machine can. Each problem
is one line (HarnessError); nothing is submitted."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from common.errors import HarnessError
from harness.launch.resources import JobResources, check_room

# GPUs per node in sinfo's GRES column ('gpu:a100:8(S:0-1)', 'gpu:4'; none in '(null)')
_GPU = re.compile(r"gpu(?::[^:,()]+)?:(\d+)")


@dataclass(frozen=True)
class Partition:
    name: str
    nodes: int
    gpus_per_node: int  # the most of any of its node kinds
    cpus_per_node: int
    time_limit_min: int | None = None  # None: infinite (or unknown)


def _sinfo(args: list[str]) -> str:
    sinfo = shutil.which("sinfo")
    if sinfo is None:
        raise HarnessError("hydra/launcher=submitit_slurm needs SLURM, and this machine has no `sinfo` on PATH "
                           "(run from a SLURM login node); nothing was submitted")
    try:
        p = subprocess.run([sinfo, *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        raise HarnessError(f"sinfo failed: {e}; nothing was submitted") from None
    if p.returncode:
        raise HarnessError(f"sinfo failed: {(p.stderr.strip().splitlines() or ['exit ' + str(p.returncode)])[0]}; "
                           "nothing was submitted")
    return p.stdout


def minutes(limit: str) -> int | None:
    """sinfo's time limit in minutes: days-hours[:minutes[:seconds]], hours:minutes:seconds,
    minutes[:seconds]; None for 'infinite' (or anything else not a time)."""
    limit = limit.strip()
    if not limit or not limit[0].isdigit():
        return None
    days, sep, rest = limit.partition("-")
    if not sep:
        days, rest = "0", limit
    parts = [int(p) for p in rest.split(":") if p.isdigit()]
    if sep or len(parts) == 3:
        hours, mins = parts[0], parts[1] if len(parts) > 1 else 0
    else:
        hours, mins = 0, parts[0]
    return int(days) * 1440 + hours * 60 + mins


def partition(name: str | None) -> Partition:
    """The partition jobs go to (None: SLURM's default, marked '*' by sinfo), from sinfo."""
    rows = [(line.split("|") + [""] * 5)[:5] for line in _sinfo(["-h", "-o", "%P|%D|%G|%c|%l"]).splitlines()
            if line.strip()]
    known = sorted({r[0].rstrip("*") for r in rows})
    if name is None:
        mine = [r for r in rows if r[0].endswith("*")] or rows
    else:
        mine = [r for r in rows if r[0].rstrip("*") == name]
    if not mine:
        what = f"SLURM partition {name!r} does not exist" if name else "SLURM has no partition"
        raise HarnessError(f"{what} (sinfo knows: {', '.join(known) or 'none'}); nothing was submitted")
    return Partition(name=mine[0][0].rstrip("*"), nodes=sum(int(r[1]) for r in mine if r[1].isdigit()),
                     gpus_per_node=max(max((int(n) for n in _GPU.findall(r[2])), default=0) for r in mine),
                     cpus_per_node=max((int(re.sub(r"\D", "", r[3]) or 0) for r in mine), default=0),
                     time_limit_min=minutes(mine[0][4]))


def check_partition(name: str | None, jobs: Sequence[tuple[str, JobResources]]) -> Partition:
    """The partition holds every job (resources.check_room); a time limit over the partition's is
    printed and left to SLURM (sbatch refuses it, or the partition's policy caps it)."""
    part = partition(name)
    for label, res in jobs:
        if part.time_limit_min is not None and res.timeout_min > part.time_limit_min:
            print(f"note: {label}: its time limit ({res.timeout_min} min, from its probe count) is over SLURM "
                  f"partition {part.name}'s {part.time_limit_min} min; set search.time_limit_s (each probe's "
                  "longest) or hydra.launcher.timeout_min", flush=True)
    check_room(jobs, f"SLURM partition {part.name}", f"a node of SLURM partition {part.name}",
               [part.gpus_per_node] * part.nodes, part.cpus_per_node)
    return part


def local_gpus() -> int:
    """GPUs this machine offers (CUDA_VISIBLE_DEVICES when set, else `nvidia-smi -L`)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() not in ("", "-1")])
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(line.startswith("GPU ") for line in out.splitlines())


def check_local(jobs: Sequence[tuple[str, JobResources]]) -> None:
    """submitit's local executor runs every job on this machine."""
    check_room(jobs, "this machine", "this machine", [local_gpus()], os.cpu_count() or 1,
               "hydra/launcher=submitit_local runs on this machine only (use submitit_slurm or ray)")
