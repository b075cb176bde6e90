"""What a plan searches and answers: the `plan.*` words (and `target_qps=`) of `python -m harness plan`.

The rest of the command line composes the experiment config as `python -m harness` does (model,
hardware, dataset, slo, search, perf, backend ...); these settings say which deployments and
scheduler knobs to cross, how the search saves time, and what a GPU costs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from common.errors import HarnessError
from engines.schedulers import policy_names, policy_spec
from harness.typed import typed

# $ per GPU-hour, on demand: the table Vidur-Search prices its configurations with (microsoft/vidur,
# vidur/config_optimizer/analyzer/constants.py GPU_COSTS, "extracted from
# https://docs.coreweave.com/welcome-to-coreweave/resource-based-pricing on 7th Feb, 2024"):
# h100 4.25, a100 2.21, a40 1.28. Vidur's "a100" server is the paper's pairwise-NVLink PCIe
# node; CoreWeave listed one price for its A100 80GB parts, used here for both. No H200 price
# there: set plan.prices.h200-141g=DOLLARS (cost is left out of the table until then).
DEFAULT_PRICES = {"h100-80g-sxm": 4.25, "a100-80g-pcie": 2.21, "a100-80g-sxm": 2.21, "a40-48g": 1.28}


@dataclass(frozen=True)
class PlanSettings:
    target_qps: float | None = None  # the load to serve; None: rank by capacity per GPU alone
    max_gpus: int | None = None  # GPUs of one replica at most; None: two nodes of the hardware
    max_total_gpus: int | None = None  # the fleet; None: as many replicas as the target needs
    tp: list[int] = field(default_factory=lambda: [1, 2, 4, 8])
    pp: list[int] = field(default_factory=lambda: [1, 2, 4])
    # data-parallel ranks with expert-parallel MoE (an MoE model; pp=1): [1] plans none, [1, 2, 4] adds DP2 and DP4 x EP
    dp: list[int] = field(default_factory=lambda: [1])
    # The scheduler grid: each policy's knob values over what its registration declares
    # (register_policy(plan=Sweep(...)), engines/schedulers/sweep.py), plan.grid.POLICY.KNOB=[...];
    # an empty list plans none of the policy (plan.grid.orca.max_num_seqs=[]).
    grid: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    screen_requests: int = 512  # requests per probe of the first pass (search.num_requests refines)
    screen_rel_tol: float = 0.05  # bracket width of the first pass
    refine_top: int = 5  # candidates refined with the full search
    rows: int = 10  # rows of the ranked table
    prune: bool = True  # skip what bounds or a threshold probe show cannot win
    margin: float = 0.3  # a screened capacity may overstate the full one by this much (never prune closer)
    workers: int | None = None  # capacities at once; None: this machine's CPUs (search.executor says where)
    prices: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_PRICES))  # $ per GPU-hour by GPU
    out: str | None = None  # the plan's directory; None: results_dir/plans/<name>/<timestamp>
    disaggregated: bool = False  # also units of P prefill + D decode instances (harness.planner.units)
    pd_max: int = 3  # P and D of a unit each in 1..pd_max
    pd_policies: list[str] = field(default_factory=lambda: ["vllm"])  # the prefill role's: vllm (whole prompts), sarathi
    check: bool = True  # simulate the winner's replicas behind least_outstanding at the target (harness.planner.check)

    def __post_init__(self) -> None:
        if self.target_qps is not None and not 0 < self.target_qps < math.inf:
            raise ValueError(f"target_qps must be a finite number > 0, got {self.target_qps}")
        for name in ("max_gpus", "max_total_gpus", "workers"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise ValueError(f"{name} must be >= 1, got {v}")
        for name in ("tp", "pp", "dp"):
            if any(int(v) < 1 for v in getattr(self, name)):
                raise ValueError(f"{name}: every value must be >= 1, got {getattr(self, name)}")
        check_grid(self.grid)
        if not self.tp or not self.pp or not self.dp:
            raise ValueError("tp, pp and dp need at least one value each")
        if self.screen_requests < 1 or self.refine_top < 1 or self.rows < 1:
            raise ValueError("screen_requests, refine_top and rows must be >= 1")
        if not 0 < self.screen_rel_tol < 1 or not 0 <= self.margin < 1:
            raise ValueError(f"need 0 < screen_rel_tol < 1 and 0 <= margin < 1, got {self.screen_rel_tol}, {self.margin}")
        prefill = [p for p in policy_names() if (sweep := policy_spec(p).plan) is not None and sweep.prefill is not None]
        if self.pd_max < 1 or any(p not in prefill for p in self.pd_policies):
            raise ValueError(f"need pd_max >= 1 and pd_policies of {', '.join(prefill)}; got {self.pd_max}, {self.pd_policies}")
        if any(not p >= 0 for p in self.prices.values()):
            raise ValueError(f"prices must be >= 0 dollars per GPU-hour, got {self.prices}")


def check_grid(grid: dict[str, dict[str, list[int]]]) -> None:
    """Each policy of plan.grid is registered with a sweep, each knob one of its axes, each value
    >= 1 (ValueError names the key); the policy's constructor checks the rest when planned."""
    for policy, knobs in grid.items():
        try:
            sweep = policy_spec(policy).plan
        except ValueError as e:
            raise ValueError(f"grid.{policy}: {e}") from None
        if sweep is None:
            raise ValueError(f"grid.{policy}: policy {policy} declares no planner sweep (register_policy(plan=...))")
        axes = [a.knob for a in sweep.axes]
        for knob, values in knobs.items():
            if knob not in axes:
                raise ValueError(f"grid.{policy}.{knob}: the planner sweeps {', '.join(axes)} of {policy}")
            if any(int(v) < 1 for v in values):
                raise ValueError(f"grid.{policy}.{knob}: every value must be >= 1, got {values}")


PLAN_WORDS = ("plan.", "target_qps=")


def split_words(words: list[str]) -> tuple[list[str], list[str]]:
    """(the plan's own words, the experiment config's overrides)."""
    mine = [w for w in words if w.startswith(PLAN_WORDS)]
    return mine, [w for w in words if not w.startswith(PLAN_WORDS)]


def plan_settings(words: list[str]) -> PlanSettings:
    """PlanSettings from `plan.KEY=VALUE` and `target_qps=X` words (lists as [a,b], prices as
    plan.prices.GPU=DOLLARS); a typo'd key is one line naming it."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    dotted = [w.removeprefix("plan.") if w.startswith("plan.") else w for w in words]
    try:
        node = OmegaConf.to_container(OmegaConf.from_dotlist(dotted), resolve=True)
    except OmegaConfBaseException as e:
        raise HarnessError(f"plan: {str(e).splitlines()[0]}") from None
    prices = node.pop("prices", None)
    retired = [k for k in node if k.endswith(("_budgets", "_max_seqs"))]
    if retired:  # the per-policy keys before the grid came from the registry
        raise HarnessError(f"plan.{retired[0]}: the scheduler grid is plan.grid.POLICY.KNOB=[...] "
                           "(e.g. plan.grid.sarathi.token_budget=[512,2048], plan.grid.orca.max_num_seqs=[])")
    settings = typed(PlanSettings, node, "plan")
    if prices:
        if not isinstance(prices, dict):
            raise HarnessError("plan.prices: give one price per GPU, plan.prices.GPU=DOLLARS")
        from dataclasses import replace

        merged = {**settings.prices, **{str(k): float(v) for k, v in prices.items()}}
        try:
            settings = replace(settings, prices=merged)
        except ValueError as e:
            raise HarnessError(f"plan: {e}") from None
    return settings
