"""Zero drift against the committed reference results, on a fast subset of results/reference.

`python -m harness nightly` re-runs every saved reference config and compares. The simulator is
deterministic, so today's code must reproduce the reference exactly: here a subset of it (the
strict ShareGPT4 capacity cells of every model, one of them pipelined, the fixed-rate, ablation and
disaggregated runs) is
re-run through the nightly command at the reference settings (2048 requests per probe, the same
seeds and search) and judged with zero capacity tolerance, then every probe of every capacity
search is compared field by field (a change that moves latencies but not capacity shows here).

The reference summaries are kept whole by harness.analysis.trim (only the per-request Parquet
files are cut), so every probe's verdict and latency summary can be compared. Float metrics are
allowed 1e-6 relative (measured: bit-identical) so a numpy/BLAS update does not fail this test;
rates, verdicts and request counts must match exactly.

If a change to the performance model or a scheduler is *meant* to move results, regenerate the
reference (python -m harness nightly, then trim) in the same commit.

Runtime: about 135 CPU-s (n_jobs=2): llama2_70b_tp4pp2_strict about 50 s, mistral7b_strict 33 s,
yi34b_tp2_strict 30 s, falcon180b_tp8_strict 9 s, the fixed-rate and ablation runs 4 s (single-process
timings). falcon180b_tp4pp2_strict (another 50 s) is left to `python -m harness nightly`: the pipelined
loop is the Llama cell's, Falcon-180B's pricing the TP-8 cell's.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import sys
from pathlib import Path

import pytest

from tests.cli import run_while_progressing

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "results" / "reference"

# The experiments re-run: the strict cells of every deployment (their ShareGPT4 runs only) and every
# run of the small fixed-rate and ablation experiments. Runs are found by their saved config, so a
# regenerated reference (new run directories) needs no edit here.
STRICT = ("mistral7b_strict", "yi34b_tp2_strict", "llama2_70b_tp4pp2_strict", "falcon180b_tp8_strict")
SMALL = ("yi34b_tp2_fixed_rate", "yi34b_tp2_ablation", "distserve_opt13b_chatbot_2p1d")  # the last: a disaggregated cluster
FLOAT_REL = 1e-6
QUIET_S = 900  # seconds without a finished job before the nightly run counts as stuck


def _dataset(run: Path) -> str:
    import yaml

    return ((yaml.safe_load((run / "config.yaml").read_text()) or {}).get("dataset") or {}).get("name", "")


def _subset() -> dict[str, list[str]]:
    out = {}
    for exp in STRICT + SMALL:
        runs = sorted(r for r in (REFERENCE / exp).iterdir() if (r / "config.yaml").is_file())
        if exp in STRICT:
            runs = [r for r in runs if _dataset(r) == "openchat_sharegpt4"]
        out[exp] = [r.name for r in runs]
    return out


SUBSET = _subset()


@pytest.fixture(scope="module")
def nightly(tmp_path_factory):
    assert all(SUBSET.values()), f"reference runs missing: {SUBSET}"
    tmp = tmp_path_factory.mktemp("drift")
    ref = tmp / "reference"
    for exp, runs in SUBSET.items():
        for run in runs:
            src = REFERENCE / exp / run
            assert (src / "config.yaml").is_file() and (src / "summary.json").is_file(), src
            shutil.copytree(src, ref / exp / run)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    # No wall-clock limit (a loaded host took over 600 s): only a run with no job finished in
    # QUIET_S fails (the slowest job, Falcon TP4-PP2, takes about 50 s on a quiet core).
    p = run_while_progressing(
        [sys.executable, "-m", "harness", "nightly", f"results_dir={tmp / 'now'}", f"reference={ref}",
         f"out={tmp / 'DRIFT.md'}", "capacity_rel=0", f"latency_rel={FLOAT_REL}", "n_jobs=2"],
        QUIET_S, cwd=ROOT, env=env)
    return p, ref, tmp / "now", tmp / "DRIFT.md"


def _summaries(root: Path) -> dict[tuple, dict]:
    """(experiment, dataset, mode, fixed_qps) -> summary.json of each run under root."""
    out = {}
    for path in sorted(root.glob("*/*/summary.json")):
        s = json.loads(path.read_text())
        key = (s["experiment"], s["workload"]["dataset"], s["mode"], s.get("search", {}).get("fixed_qps"))
        cfg = (path.parent / "config.yaml").read_text()
        assert key not in out, f"two runs of {key} under {root}"
        out[key] = dict(s, _config=cfg)
    return out


def _close(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return a is b
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        if math.isinf(a) or math.isinf(b):
            return a == b
        return abs(a - b) <= FLOAT_REL * max(abs(a), abs(b))
    return a == b


def test_nightly_reproduces_the_reference_exactly(nightly):
    p, ref, _, drift = nightly
    # One check per capacity search, two (P50 TTFT, P99 TBT) per fixed-rate probe.
    checks = sum(len(s["schedulers"]) * (1 if s["mode"] == "capacity" else 2) for s in _summaries(ref).values())
    line = next((l for l in p.stdout.splitlines() if l.startswith("nightly:")), None)
    assert line is not None, p.stdout[-3000:] + p.stderr[-3000:]
    table = drift.read_text()
    failing = [row for row in table.splitlines() if row.startswith(("| DRIFT |", "| MISSING |"))]
    assert p.returncode == 0 and line.startswith("nightly: PASS (0 failing of "), "\n".join([line, *failing[:8]])
    assert "| DRIFT |" not in table and "| MISSING |" not in table and "| NEW |" not in table
    assert line.startswith(f"nightly: PASS (0 failing of {checks} checks)") and table.count("| ok |") == checks, line


def test_every_probe_matches_the_reference(nightly):
    p, ref, now, _ = nightly
    assert p.returncode in (0, 1), p.stderr[-3000:]
    ref_s, cur_s = _summaries(ref), _summaries(now)
    assert set(cur_s) == set(ref_s)
    mismatches = []
    for key, r in ref_s.items():
        c = cur_s[key]
        # Keys added to the summary since the reference was made are new fields, not drift.
        assert {k: c["slo"].get(k) for k in r["slo"]} == r["slo"], key
        assert r["kv_capacity_tokens"] == c["kv_capacity_tokens"], key
        assert list(r["schedulers"]) == list(c["schedulers"]), key
        for name, rs in r["schedulers"].items():
            cs = c["schedulers"][name]
            for f in ("capacity_qps", "lowest_failing_qps", "saturated", "config"):
                if rs.get(f) != cs.get(f):
                    mismatches.append(f"{key} {name} {f}: {rs.get(f)} -> {cs.get(f)}")
            rp, cp = rs["probes"], cs["probes"]
            if [x["qps"] for x in rp] != [x["qps"] for x in cp]:
                mismatches.append(f"{key} {name} probe rates {[x['qps'] for x in rp]} -> {[x['qps'] for x in cp]}")
                continue
            for a, b in zip(rp, cp):
                for f, v in a.items():
                    if f == "reason":  # formatted from the floats compared here
                        continue
                    if not _close(v, b.get(f)):
                        mismatches.append(f"{key} {name} qps {a['qps']} {f}: {v!r} -> {b.get(f)!r}")
    assert not mismatches, f"{len(mismatches)} differences, first: " + "\n".join(mismatches[:10])
