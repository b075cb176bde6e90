"""The planner with DP x EP layouts (issue 34 item 3): enumerated for an MoE model on request, bounded
from a rank's fastest step, exported as vLLM's flags; refused for a dense model."""
from __future__ import annotations

from harness.config import compose, experiment_config
from harness.planner.bounds import capacity_bound, data_parallel_bound
from harness.planner.export import vllm_serve_words
from harness.planner.settings import PlanSettings
from harness.planner.space import enumerate_space
from tests.cli import assert_refused
from tests.test_plan import grid_of

QWEN = ["model=qwen3-30b-a3b", "hardware=h100_80g", "slo.tbt_s=0.1", "search.num_requests=64"]


def test_dp_layouts_enumerated_bounded_and_exported() -> None:
    space = enumerate_space(experiment_config(compose(QWEN)), PlanSettings(tp=[1], pp=[1, 2], dp=[1, 2], grid=grid_of([512], [], [])))
    assert set(space.plans) == {(1, 1), (1, 2), (1, 1, 2)}  # no DP with PP
    dp2 = next(c for c in space.candidates if c.dp == 2)
    assert (dp2.key, dp2.gpus) == ("tp1pp1dp2ep/sarathi_b512", 2)
    plan = space.plan_of(dp2)
    assert (plan.deployment.dp, plan.deployment.ep) == (2, True)
    words = vllm_serve_words(plan, "sarathi_b512")
    assert words[words.index("--data-parallel-size") + 1] == "2" and "--enable-expert-parallel" in words
    # the bound: two ranks, each at least as fast as with its partner on the dummy batch
    one = capacity_bound(plan, "sarathi_b512")
    both = data_parallel_bound(plan, "sarathi_b512")
    assert both.qps >= 2 * one.qps > 0


def test_plan_refuses_dp_for_a_dense_model(tmp_path) -> None:
    assert_refused(tmp_path, ["plan", "model=llama3-8b", "hardware=h100_80g", "slo.tbt_s=0.1", "plan.dp=[1,2]"],
                   "is dense")
