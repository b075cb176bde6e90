"""Zero drift of the first Sarathi paper's reference runs (results/reference/sarathi23_*): a fast
subset re-run through `python -m harness nightly` at zero throughput tolerance, then every metric
of every scheduler compared with the saved summary (floats to 1e-6 relative, counts exactly).
If a change is meant to move these numbers, regenerate the reference runs in the same commit
(python -m harness figure=all into an empty results_dir, then harness.analysis.trim)."""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "results" / "reference"
SUBSET = ("sarathi23_gain_llama13b_1k", "sarathi23_orca_1k", "sarathi23_pd_c256_b18_pd14")
FLOAT_REL = 1e-6


@pytest.fixture(scope="module")
def nightly(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("s23drift")
    for exp in SUBSET:
        shutil.copytree(REFERENCE / exp, tmp / "reference" / exp)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([sys.executable, "-m", "harness", "nightly", f"results_dir={tmp / 'now'}",
                        f"reference={tmp / 'reference'}", f"out={tmp / 'DRIFT.md'}", "capacity_rel=0", "n_jobs=2"],
                       capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    return p, tmp


def _summaries(root: Path) -> dict[str, dict]:
    return {json.loads(p.read_text())["experiment"]: json.loads(p.read_text()) for p in root.glob("*/*/summary.json")}


def test_the_nightly_check_passes_at_zero_tolerance(nightly):
    p, tmp = nightly
    ref = _summaries(tmp / "reference")
    checks = sum(len(s["offline"]) for s in ref.values())
    assert checks == 7
    assert p.returncode == 0 and f"nightly: PASS (0 failing of {checks} checks)" in p.stdout, p.stdout[-2000:] + p.stderr[-2000:]


def test_every_offline_metric_matches(nightly):
    _, tmp = nightly
    ref, now = _summaries(tmp / "reference"), _summaries(tmp / "now")
    assert set(ref) == set(now) == set(SUBSET)
    bad = []
    for exp, r in ref.items():
        assert r["gains"].keys() == now[exp]["gains"].keys() and r["workload"]["source"] == now[exp]["workload"]["source"]
        for name, rs in r["offline"].items():
            for key, a in rs.items():
                b = now[exp]["offline"][name].get(key)
                if isinstance(a, float) and isinstance(b, float) and math.isfinite(a):
                    ok = abs(a - b) <= FLOAT_REL * max(abs(a), abs(b))
                else:
                    ok = a == b
                if not ok:
                    bad.append(f"{exp} {name} {key}: {a!r} -> {b!r}")
    assert not bad, "\n".join(bad[:10])
