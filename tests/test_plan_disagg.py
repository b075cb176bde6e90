"""The planner's disaggregated candidates (plan.disaggregated=true: units of P prefill + D decode
instances) and its replica check (the winner's fleet simulated behind least_outstanding at the
target), against direct cluster runs of the same configs; real simulator, small request counts."""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from harness.config import compose, experiment_config
from harness.planner.check import ROUTER, check_winner
from harness.planner.search import run_plan
from harness.planner.settings import PlanSettings
from harness.planner.space import enumerate_space
from harness.planner.tasks import SearchTask, run_search_task, summarize_probe
from harness.planner.units import Unit
from harness.config import plan_experiment
from harness.search.probe import ProbeTask, run_probe_task
from tests.test_plan import grid_of

ROOT = Path(__file__).resolve().parent.parent
SMALL = ["model=mistral-7b", "hardware=a100_80g", "dataset=openchat_sharegpt4", "slo.tbt_s=0.1", "search.num_requests=128"]
VLLM = ["scheduler=[vllm]", "scheduler.vllm.max_num_seqs=64"]  # the plan's vllm_s64, run directly
SETTINGS = PlanSettings(tp=[1], pp=[1], grid=grid_of([], [64], []), disaggregated=True,
                        pd_max=2, screen_requests=64, workers=1, refine_top=5, prune=False)


def _direct(words: list[str]):
    return plan_experiment(compose(SMALL + VLLM + words))


def _roles(u, copies: int = 1) -> list[str]:
    return [f"cluster.prefill_instances={u.prefill * copies}", f"cluster.decode_instances={u.decode * copies}",
            f"cluster.prefill_tp={u.prefill_tp}", f"cluster.decode_tp={u.decode_tp}"]


def test_a_cluster_of_unlike_roles_counts_each_role_s_gpus(tmp_path):
    """2 prefill instances of TP-1 and 1 decode instance of TP-2 are 4 GPUs (2 x 1 + 1 x 2; with the
    roles' deployments swapped, 5): the planner's unit, the run's saved count and its goodput per GPU."""
    unit = Unit(prefill=2, prefill_tp=1, prefill_pp=1, decode=1, decode_tp=2, decode_pp=1)
    assert unit.gpus == 4
    p = subprocess.run([sys.executable, "-m", "harness", *SMALL, *VLLM, *_roles(unit), "search.fixed_qps=2",
                        "progress=false", f"results_dir={tmp_path}"], capture_output=True, text=True, cwd=ROOT,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    (summary,) = tmp_path.glob("*/*/summary.json")
    saved = json.loads(summary.read_text())
    (probe,) = saved["schedulers"]["vllm"]["probes"]
    assert saved["num_gpus"] == 4 and probe["goodput"] > 0 and probe["goodput_per_gpu"] == probe["goodput"] / 4


@pytest.fixture(scope="module")
def planned():
    space = enumerate_space(experiment_config(compose(SMALL)), SETTINGS)
    return space, run_plan(space, SETTINGS, log=lambda m: None)


def test_units_are_listed_with_their_gpus(planned):
    space, _ = planned
    units = {c.deployment: c.gpus for c in space.candidates if c.unit}
    assert units == {"1P(tp1):1D(tp1)": 2, "1P(tp1):2D(tp1)": 3, "2P(tp1):1D(tp1)": 3, "2P(tp1):2D(tp1)": 4}
    assert [c.key for c in space.candidates if not c.unit] == ["tp1pp1/vllm_s64"]
    plan = space.unit_plans[next(c.unit for c in space.candidates if c.deployment == "2P(tp1):1D(tp1)")]
    assert (plan.cluster.prefill_instances, plan.cluster.decode_instances) == (2, 1) and plan.disagg is not None
    # off by default: the same space without the setting has no unit
    plain = enumerate_space(experiment_config(compose(SMALL)), replace(SETTINGS, disaggregated=False))
    assert not plain.unit_plans and all(c.unit is None for c in plain.candidates)


def test_unit_capacity_is_a_direct_cluster_search(planned):
    """Each refined unit's capacity brackets the same boundary as a cold capacity search of the
    cluster config written by hand (same seed and requests), and its bound is above it."""
    _, run = planned
    units = [e for e in run.evaluations if e.candidate.unit and e.full is not None]
    assert len(units) >= 2
    for e in units:
        plan = _direct(_roles(e.candidate.unit))
        mine = run.space.plan_of(e.candidate).workload
        assert (plan.workload.prompt_lens == mine.prompt_lens).all() and (plan.workload.output_lens == mine.output_lens).all()
        direct = run_search_task(SearchTask(plan, "vllm", 1.0, plan.search.min_qps, plan.search.max_qps, plan.search.rel_tol))
        assert direct.capacity_qps > 0 and e.full.capacity_qps > 0
        assert direct.capacity_qps < e.full.lowest_failing_qps and e.full.capacity_qps < direct.lowest_failing_qps, (
            e.candidate.key, e.full, direct.capacity_qps, direct.lowest_failing_qps)
        assert summarize_probe(run_probe_task(ProbeTask(plan, "vllm", e.full.capacity_qps))).passed
        assert e.full.capacity_qps <= e.bound.qps, (e.candidate.key, e.bound)


def test_replica_check_is_a_direct_fleet_probe(planned):
    space, run = planned
    best = max((e for e in run.evaluations if e.candidate.unit and e.full), key=lambda e: e.capacity_qps)
    target = 1.5 * best.capacity_qps  # two units
    checks = check_winner(space, best, target, log=lambda m: None)
    assert checks[0].replicas == 2 and checks[0].gpus == 2 * best.candidate.gpus
    plan = _direct(_roles(best.candidate.unit, 2) + [f"cluster.router={ROUTER}", "search.num_requests=256"])
    direct = summarize_probe(run_probe_task(ProbeTask(plan, "vllm", target)))
    assert (checks[0].passed, checks[0].probe.tbt_s, checks[0].requests) == (direct.passed, direct.tbt_s, 256)


def test_a_fleet_that_fails_is_said_so_and_one_more_replica_tried(planned):
    """A colocated winner whose capacity is overstated threefold: its replicas fail at the target
    in the cluster simulation, and the check tries one more."""
    space, run = planned
    e = next(x for x in run.evaluations if x.candidate.unit is None and x.full is not None)
    inflated = replace(e, full=replace(e.full, capacity_qps=3 * e.full.capacity_qps))
    checks = check_winner(space, inflated, 2 * inflated.capacity_qps, log=lambda m: None)
    assert len(checks) == 2 and not checks[0].passed and checks[1].replicas == 3
    assert "FAIL at target (2 replicas" in checks[0].line("paper")
    plan = _direct(["cluster.instances=2", f"cluster.router={ROUTER}", "search.num_requests=256"])
    assert summarize_probe(run_probe_task(ProbeTask(plan, "vllm", 2 * inflated.capacity_qps))).passed is False


def test_plan_cli_with_units(tmp_path):
    out = tmp_path / "plan"
    words = ["plan.tp=[1]", "plan.pp=[1]", "plan.grid.sarathi.token_budget=[]", "plan.grid.vllm.max_num_seqs=[64]", "plan.grid.orca.max_num_seqs=[]",
             "plan.disaggregated=true", "plan.pd_max=2", "plan.screen_requests=64", "plan.workers=1", "target_qps=10",
             f"plan.out={out}"]
    p = subprocess.run([sys.executable, "-m", "harness", "plan", *SMALL, *words], capture_output=True, text=True, cwd=ROOT,
                       timeout=600)
    assert p.returncode == 0, p.stderr
    assert "4 P/D units" in p.stdout and "P(tp1):" in (out / "table.md").read_text()
    record = json.loads((out / "plan.json").read_text())
    assert "P(tp1):" in record["winner"] and record["checked"][0]["verdict"] in ("pass", "fail")
    assert ("checked: pass at target" if record["checked"][0]["verdict"] == "pass" else "WARNING") in p.stdout
    serve = (out / "serve.sh").read_text()
    assert "NOT a working deployment" in serve and sum("--kv-transfer-config" in line for line in serve.splitlines() if line.startswith("vllm serve")) == 2
    preset = next((out / "experiment").glob("*.yaml"))
    plan = plan_experiment(compose([f"hydra.searchpath=[file://{out}]", f"experiment={preset.stem}"]))
    assert plan.disagg is not None and f"{plan.cluster.prefill_instances}P(tp1):{plan.cluster.decode_instances}D(tp1)" \
        in record["winner"]
