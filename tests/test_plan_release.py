"""The planner and a shipped engine release: its grid names the vllm_v1 schedulers itself, so a
refusal must name a word the user can type (`release=vllm-X`, harness/settings/release.py), never
`scheduler.<grid name>.release`; and that word plans the grid with the release's rules."""
from __future__ import annotations

from harness.config import compose, experiment_config
from harness.planner.settings import PlanSettings
from harness.planner.space import enumerate_space
from tests.cli import assert_refused

SMALL = ["model=mistral-7b", "hardware=a100_80g", "dataset=openchat_sharegpt4", "slo.tbt_s=0.1", "search.num_requests=32"]
V1_ONLY = ["plan.tp=[1]", "plan.pp=[1]", "plan.grid.vllm_v1.max_num_batched_tokens=[2048]", "plan.grid.sarathi.token_budget=[]",
           "plan.grid.vllm.max_num_seqs=[]", "plan.grid.orca.max_num_seqs=[]", "plan.workers=1"]


def test_a_shipped_stack_without_release_names_the_release_word(tmp_path) -> None:
    assert_refused(tmp_path, ["plan", *SMALL, *V1_ONLY, "perf.stack=vllm-0.19"],
                   "perf.stack=vllm-0.19 prices vLLM 0.19 but the plan's vllm_v1_b2048 run their default release's "
                   "rules: plan with release=vllm-0.19 in place of perf.stack")


def test_the_release_word_plans_the_grid_with_its_rules_and_keeps_the_sweep() -> None:
    """release=vllm-0.19: every grid vllm_v1 runs 0.19's rules at the plan's own budget (2048, not
    the release's default flags), priced by the 0.19 stack; it was refused as two releases."""
    settings = PlanSettings(tp=[1], pp=[1], workers=1, grid={"vllm_v1": {"max_num_batched_tokens": [2048]},
                            "sarathi": {"token_budget": []}, "vllm": {"max_num_seqs": []}, "orca": {"max_num_seqs": []}})
    space = enumerate_space(experiment_config(compose([*SMALL, "release=vllm-0.19"])), settings)
    (plan,) = space.plans.values()
    (sc,) = plan.schedulers.values()
    assert plan.deployment.perf.deployment.stack == "vllm-0.19"
    assert (sc.policy, sc.release, sc.max_num_batched_tokens) == ("vllm_v1", "0.19", 2048)


def test_without_a_shipped_stack_the_grid_is_unchanged() -> None:
    settings = PlanSettings(tp=[1], pp=[1], workers=1, grid={"vllm_v1": {"max_num_batched_tokens": [2048]}})
    space = enumerate_space(experiment_config(compose(SMALL)), settings)
    assert space.grid["vllm_v1_b2048"].get("release", "0.32") == "0.32"
