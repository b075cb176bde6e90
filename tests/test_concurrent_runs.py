"""Two identical runs at once into one results directory both finish, each with its own run
directory (claimed atomically) and without tripping over each other's probe-cache files."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_two_identical_runs_at_once_both_finish(tmp_path):
    args = [sys.executable, "-m", "harness", "experiment=yi34b_tp2_strict", "scheduler=[sarathi,vllm]",
            "search.num_requests=64", f"results_dir={tmp_path}", "progress=false"]
    for trial in range(3):  # before the fix, 6 of 14 trials crashed one of the two runs
        procs = [subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(2)]
        outs = [p.communicate(timeout=300) for p in procs]
        for p, (out, err) in zip(procs, outs):
            assert p.returncode == 0, err[-3000:]
        dirs = [Path(out.strip().splitlines()[-1].removeprefix("results: ")) for out, _ in outs]
        assert dirs[0] != dirs[1]
        caps = [json.loads((d / "summary.json").read_text())["schedulers"]["sarathi"]["capacity_qps"] for d in dirs]
        assert caps[0] == caps[1]
    runs = [d for d in (tmp_path / "yi34b_tp2_strict").iterdir() if not d.name.startswith(".")]
    assert len(runs) == 6
    assert not list((tmp_path / "yi34b_tp2_strict").glob(".*.partial"))
    assert not list(tmp_path.rglob("*.tmp"))
