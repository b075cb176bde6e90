"""`python -m harness figure=...` and `python -m harness nightly`, end to end on small results."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "results"


def run(*args):
    return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True, cwd=ROOT, timeout=900)


def test_figure_all_from_saved_results(tmp_path):
    p = run("figure=all", "run_missing=false", f"results_dir={FIXTURE}", f"figures_dir={tmp_path}")
    assert p.returncode == 0, p.stderr
    report = (tmp_path / "REPORT.md").read_text()
    assert "fig10_11_capacity.png" in report and "perf/perf_fig14_chunking_overhead.png" in report
    assert all((tmp_path / f).stat().st_size > 20_000 for f in ("fig01_generation_stall.png", "fig10_11_capacity.png"))
    # The fixture's 128-request runs are not at the paper's settings: listed, and the reference drawn instead.
    assert "run(s) left out, not at the paper's settings" in report and "search.num_requests=128 (paper: 2048)" in report
    assert "drawn from the reference runs" in report
    p = run("figure=nope", "run_missing=false")
    assert p.returncode == 2 and "unknown figure" in p.stderr


def test_nightly_passes_unchanged_and_fails_on_drift(tmp_path):
    # The reference is a run of today's code: a saved fixture would drift with every change to the
    # performance model, which is what the nightly check is for, not what this test is about.
    ref = tmp_path / "reference"
    p = run("experiment=yi34b_tp2_strict", "search.num_requests=128", f"results_dir={ref}", "progress=false")
    assert p.returncode == 0, p.stderr
    p = run("nightly", f"results_dir={tmp_path / 'now'}", f"reference={ref}", f"out={tmp_path / 'DRIFT.md'}")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "nightly: PASS" in p.stdout

    summary_path = next(ref.glob("yi34b_tp2_strict/*/summary.json"))
    summary = json.loads(summary_path.read_text())
    summary["schedulers"]["sarathi"]["capacity_qps"] *= 1.5  # an injected drift
    summary_path.write_text(json.dumps(summary))
    p = run("nightly", f"results_dir={tmp_path / 'now'}", f"reference={ref}", f"out={tmp_path / 'DRIFT.md'}")
    assert p.returncode == 1 and "nightly: FAIL" in p.stdout
    assert "sarathi" in (tmp_path / "DRIFT.md").read_text()
    # Every check measures today's code: it re-runs each reference config (from the probe cache
    # when the code is unchanged), never reuses an earlier check's results.
    assert "running 1" in p.stdout


def test_nightly_without_reference_is_bad_input(tmp_path):
    p = run("nightly", f"reference={tmp_path / 'none'}")
    assert p.returncode == 2 and p.stderr.startswith("error: no reference runs")


def test_a_failing_job_loses_no_other_and_is_named(tmp_path, capsys):
    from common.errors import HarnessError
    from harness.commands.jobs import find_run, run_configs
    from harness.config import compose

    common = ["scheduler=[sarathi]", "search.num_requests=16", "progress=false", f"results_dir={tmp_path}"]
    good = compose(["experiment=mistral7b_strict", *common])
    bad = compose(["experiment=yi34b_tp2_strict", "perf=profile", *common])  # no perf.path: fails when planned
    with pytest.raises(HarnessError, match="1 of 2 configs failed: yi34b_tp2_strict"):
        run_configs([bad, good], n_jobs=2, groups=["yi", "mistral"])
    out = capsys.readouterr().out
    # each job's line says what is left, by group, whichever ends first
    assert "[1/2]" in out and "none left" in out and ("left: yi 1" in out or "left: mistral 1" in out)
    assert "yi34b_tp2_strict: FAILED" in out and "mistral7b_strict: done" in out and "perf.path" in out
    assert find_run(good) is not None and find_run(bad) is None  # the good job's results were kept


def test_runs_that_differ_only_in_their_slo_share_their_probes(tmp_path, capsys):
    """Configs that simulate the same probes (same but for SLO and name) run as one job and
    simulate each probe once; each gets the outcome it gets alone (its own SLO's verdicts)."""
    import json

    from harness.commands.jobs import find_run, run_configs
    from harness.config import compose

    common = ["experiment=mistral7b_strict", "scheduler=[vllm]", "search.num_requests=32", "progress=false"]
    strict = compose([*common, f"results_dir={tmp_path / 'both'}"])
    relaxed = [*common, "slo.kind=relaxed", "name=mistral7b_vllm_relaxed"]
    run_configs([strict, compose([*relaxed, f"results_dir={tmp_path / 'both'}"])], n_jobs=1)
    assert "probes were simulated once for this run and another" in capsys.readouterr().out
    alone = compose([*relaxed, f"results_dir={tmp_path / 'alone'}"])
    run_configs([alone], n_jobs=1)
    assert "simulated once" not in capsys.readouterr().out

    def searches(cfg):
        return json.loads((find_run(cfg) / "summary.json").read_text())["schedulers"]

    shared = searches(compose([*relaxed, f"results_dir={tmp_path / 'both'}"]))
    assert shared == searches(alone) and shared != searches(strict)  # the relaxed SLO's own verdicts


def test_a_probe_is_shared_only_with_the_same_schedulers_settings(tmp_path, capsys):
    """Sarathi-Serve's strict and relaxed presets differ in its token budget besides the SLO: they
    run as one job, vLLM's probes shared, Sarathi-Serve's each simulated with its own budget."""
    import json

    from harness.commands.jobs import find_run, run_configs
    from harness.config import compose

    common = ["scheduler=[sarathi,vllm]", "search.num_requests=32", "progress=false"]
    strict = compose(["experiment=mistral7b_strict", *common, f"results_dir={tmp_path / 'both'}"])
    relaxed = ["experiment=mistral7b_relaxed", *common]
    run_configs([strict, compose([*relaxed, f"results_dir={tmp_path / 'both'}"])], n_jobs=1)
    assert "probes were simulated once for this run and another" in capsys.readouterr().out
    alone = compose([*relaxed, f"results_dir={tmp_path / 'alone'}"])
    run_configs([alone], n_jobs=1)

    def searches(cfg):
        return json.loads((find_run(cfg) / "summary.json").read_text())["schedulers"]

    assert searches(compose([*relaxed, f"results_dir={tmp_path / 'both'}"])) == searches(alone)
