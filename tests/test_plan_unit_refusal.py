"""plan.disaggregated=true asks for P/D units: a plan that can form none (no grid scheduler has
plan.pd_policies, or no unit fits plan.max_gpus) is refused in one line naming why, not run
without them."""
from __future__ import annotations

from tests.cli import assert_refused

SMALL = ["model=mistral-7b", "hardware=a100_80g", "dataset=openchat_sharegpt4", "slo.tbt_s=0.1", "search.num_requests=64"]
VLLM_ONLY = ["plan.tp=[1]", "plan.pp=[1]", "plan.grid.sarathi.token_budget=[]", "plan.grid.vllm.max_num_seqs=[64]",
             "plan.grid.orca.max_num_seqs=[]", "plan.disaggregated=true", "plan.pd_max=2", "plan.workers=1"]


def test_pd_policies_no_grid_scheduler_has_is_refused(tmp_path) -> None:
    assert_refused(tmp_path, ["plan", *SMALL, *VLLM_ONLY, "plan.pd_policies=[sarathi]"],
                   "no P/D unit of 1..2 prefill + decode instances up to 8 GPUs can run: plan.pd_policies=['sarathi']: "
                   "no scheduler of the grid has these policies")


def test_no_unit_within_max_gpus_is_refused(tmp_path) -> None:
    """One GPU holds a tp1 deployment but never a unit of two instances."""
    assert_refused(tmp_path, ["plan", *SMALL, *VLLM_ONLY, "plan.max_gpus=1"],
                   "the smallest, 1 prefill + 1 decode instance of 1 GPU(s), is over plan.max_gpus=1")
