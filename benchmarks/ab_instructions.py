"""Two revisions' simulation cost counted in instructions, not seconds (speed work's before/after).

On a shared 2-vCPU host the same run's CPU seconds move by up to 2x between hours, so a 5 % gain
cannot be seen in them. valgrind's callgrind counts the instructions a run executes, which repeat
to about 0.02 % (PYTHONHASHSEED fixed): each revision runs in its own fresh git worktree, the
fleet bench's one replica (`bench_fleet.py --replicas 1 --lone round_robin --digest`) under
callgrind, once for `--horizon-s` of arrivals and once for 20 s (imports and workload building,
subtracted), both revisions side by side. The records' digests must agree: a speed change that
changes them is not one.

    python benchmarks/ab_instructions.py BEFORE AFTER [--horizon-s 3600]

Instructions are not time (memory stalls are not counted), so report both. The worktrees are not
built, so both revisions run their Python source, not the mypyc build `pip install -e .` makes
(engines/compiled.py): a change to compiled code is counted as its source runs. Needs valgrind; about
2 minutes a pair at the default horizon (~50x slower than a plain run). A revision with numba's
decode-run kernel prices a process's first 20,000 runs with numpy (decode_runs.KERNEL_AFTER; an
hour of one replica makes ~6,000), so only longer horizons count it, with numba's import.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STARTUP_S = 20.0  # a horizon that simulates almost nothing: the run's fixed cost


def _count(tree: Path, horizon_s: float) -> tuple[int, str]:
    """(instructions, records digest) of one bench run in `tree`."""
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
           "benchmarks/bench_fleet.py", "--replicas", "1", "--horizon-s", str(horizon_s), "--day-s", "86400",
           "--lone", "round_robin", "--digest"]
    env = dict(os.environ, PYTHONHASHSEED="0", PYTHONPATH=str(tree))
    out = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    collected = re.search(r"Collected : (\d+)", out.stderr)
    digest = re.search(r"records (\w+)", out.stdout)
    if out.returncode or not collected or not digest:
        raise SystemExit(f"{tree.name}: the run failed (exit {out.returncode}):\n{out.stderr[-2000:]}")
    return int(collected.group(1)), digest.group(1)


def _warm(tree: Path) -> None:
    """Compile a revision's numba kernels into its fresh worktree's cache, outside callgrind: the
    counted run then loads them (numba's import and the load remain in its count), rather than
    counting LLVM compiling (engines/perf/run_kernel.py, where a revision has it)."""
    if (tree / "engines" / "perf" / "run_kernel.py").exists():
        subprocess.run([sys.executable, "-c", "from engines.perf import run_kernel; run_kernel.kernel()"],
                       cwd=tree, env=dict(os.environ, PYTHONPATH=str(tree)), check=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("before", help="a git revision")
    ap.add_argument("after", help="a git revision")
    ap.add_argument("--horizon-s", type=float, default=3600.0, help="simulated seconds of arrivals (1 request/s)")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        print("ab_instructions: valgrind is not installed", file=sys.stderr)
        raise SystemExit(2)
    revs = []
    for rev in (args.before, args.after):
        got = subprocess.run(["git", "rev-parse", "--verify", "--short", f"{rev}^{{commit}}"], cwd=REPO,
                             capture_output=True, text=True)
        if got.returncode:
            print(f"ab_instructions: {rev!r} is not a revision of this repository", file=sys.stderr)
            raise SystemExit(2)
        revs.append(got.stdout.strip())
    with tempfile.TemporaryDirectory(prefix="ab-instructions-") as tmp:
        trees = [Path(tmp) / f"{i}-{rev}" for i, rev in enumerate(revs)]
        for tree, rev in zip(trees, revs):
            subprocess.run(["git", "worktree", "add", "--quiet", "--detach", str(tree), rev], cwd=REPO, check=True)
            _warm(tree)
        try:
            with ThreadPoolExecutor(2) as pool:  # the two revisions side by side, one a core
                startup = list(pool.map(lambda t: _count(t, STARTUP_S), trees))
                full = list(pool.map(lambda t: _count(t, args.horizon_s), trees))
        finally:
            for tree in trees:
                subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPO, check=False)
    sims = [f[0] - s[0] for f, s in zip(full, startup)]
    for label, rev, (total, digest), sim in zip(("before", "after"), revs, full, sims):
        print(f"{label:6s} {rev}  {total / 1e9:8.3f} G instructions, {sim / 1e9:8.3f} G simulating "
              f"{args.horizon_s:.0f} s  records {digest}")
    same = full[0][1] == full[1][1]
    print(f"after / before (simulating): {sims[1] / sims[0]:.4f}  ({sims[0] / sims[1]:.3f}x)  "
          + ("same records" if same else "RECORDS DIFFER: not a speed change"))
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
