"""A policy registered outside the harness (the example plugin, examples/policies/) is planned,
exported and reported by `python -m harness plan` from its registration alone: its sweep
(`register_policy(plan=Sweep(...))`) makes its grid, names its candidates and labels its answer,
and vLLM's exporter refuses it by name (its registration declares no vllm= mode)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import examples.policies.shortest_prompt_first  # noqa: F401  (registers it, as its entry point does)
from common.errors import HarnessError
from engines.schedulers import SchedulerConfig, policy_spec
from harness.config import compose
from harness.planner.settings import PlanSettings, plan_settings
from harness.planner.space import scheduler_grid

ROOT = Path(__file__).resolve().parent.parent
SPF = "shortest_prompt_first"
SMALL = ["model=mistral-7b", "hardware=a100_80g", "dataset=openchat_sharegpt4", "slo.tbt_s=0.1", "search.num_requests=128"]
ONLY_SPF = ["plan.tp=[1]", "plan.pp=[1]", f"plan.grid.{SPF}.token_budget=[512]", "plan.grid.sarathi.token_budget=[]",
            "plan.grid.vllm.max_num_seqs=[]", "plan.grid.orca.max_num_seqs=[]"]


def test_the_grid_is_what_each_registration_declares():
    default = scheduler_grid(PlanSettings())
    assert not [n for n in default if n.startswith(SPF)]  # a plugin is planned when the plan asks, not by default
    # every planned node's policy declares a sweep, and each candidate varies its sweep's first knob
    assert {n["policy"] for n in default.values()} == {"sarathi", "vllm", "orca"}
    grid = scheduler_grid(PlanSettings(grid={SPF: {"token_budget": [512, 2048], "max_num_seqs": [64, 128]}}))
    mine = {k: v for k, v in grid.items() if v["policy"] == SPF}
    assert list(mine) == [f"{SPF}_b512_s64", f"{SPF}_b2048_s64", f"{SPF}_b512_s128", f"{SPF}_b2048_s128"]
    assert mine[f"{SPF}_b2048_s64"] == {"policy": SPF, "token_budget": 2048, "max_num_seqs": 64}
    assert policy_spec(SPF).plan.knob == "token_budget"
    sweep = policy_spec(SPF).plan
    defaults = {k.name: k.default for k in policy_spec(SPF).knobs}
    assert sweep.describe(SPF, dict(SchedulerConfig(SPF, token_budget=512).knobs), defaults) == f"{SPF} budget 512"
    assert sweep.describe(SPF, dict(SchedulerConfig(SPF, max_num_seqs=64).knobs), defaults) == f"{SPF} budget 512, batch 64"


def test_a_grid_key_the_registration_does_not_declare_is_one_line():
    with pytest.raises(HarnessError, match=f"grid.{SPF}.lifo: the planner sweeps token_budget, max_num_seqs of {SPF}"):
        plan_settings([f"plan.grid.{SPF}.lifo=[1]"])
    with pytest.raises(HarnessError, match="policy hybrid_only declares no planner sweep"):
        plan_settings(["plan.grid.hybrid_only.token_budget=[512]"])
    with pytest.raises(HarnessError, match=r"plan.grid.POLICY.KNOB=\[...\]"):  # the keys before the grid came from the registry
        plan_settings(["plan.sarathi_budgets=[512]"])


def test_the_plugin_is_planned_exported_and_reported(tmp_path):
    out = tmp_path / "plan"
    p = subprocess.run([sys.executable, "-m", "harness", "plan", *SMALL, *ONLY_SPF, "plan.screen_requests=64",
                        "plan.workers=1", "target_qps=10", f"plan.out={out}"], capture_output=True, text=True, cwd=ROOT,
                       timeout=600)
    assert p.returncode == 0, p.stderr
    assert "1 configurations in" in p.stdout
    assert f"winner: tp1pp1/{SPF}_b512, TP-1 (1 GPU), {SPF} budget 512:" in p.stdout  # reported as its sweep labels it
    assert f"{SPF} budget 512" in (out / "table.md").read_text() and (out / "pareto.png").exists()
    serve = (out / "serve.sh").read_text()  # refused by name: vLLM admits FCFS
    assert f"# not expressible with vllm serve: policy '{SPF}' cannot be expressed with vLLM's flags" in serve
    presets = list((out / "experiment").glob("*.yaml"))
    assert len(presets) == 1
    from harness.config import plan_experiment

    checked = plan_experiment(compose([f"hydra.searchpath=[file://{out}]", f"experiment={presets[0].stem}"]))
    assert checked.schedulers == {SPF: SchedulerConfig(SPF, token_budget=512, max_num_seqs=128)}  # the preset runs it
