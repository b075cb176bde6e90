"""The configurations a plan compares: every TP x PP of the hardware's nodes whose weights and KV
cache fit (one planned experiment each, `harness.experiment`), crossed with the scheduler grid.

A deployment fits when the performance model's placement accepts it (TP divides the attention
heads, PP at most the layers) and the KV room left beside the weights holds one sequence of
max_model_len, as the engine sizes it (`engines.perf.memory`). GPUs are placed as
`engines.perf.Deployment.create` places them: TP groups fill a node before the next, so a
TP group wider than a node crosses the inter-node link (the paper's Falcon-180B TP-8).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from common.errors import HarnessError
from engines.perf.architectures import get_model
from engines.perf.cpu_device import is_cpu
from engines.perf.hardware import get_gpu, get_topology
from engines.perf.kernels import STACKS
from engines.schedulers import SchedulerConfig, make_policy, policy_names, policy_spec
from harness.planner.settings import PlanSettings
from harness.planner.units import Unit, enumerate_units
from harness.backends.deployment import CPU_TOPOLOGY
from harness.experiment import ExperimentPlan, deployment_of, is_offline, plan_experiment
from harness.settings.deployment import HardwareSettings, ParallelSettings
from harness.settings.experiment import ExperimentConfig


@dataclass(frozen=True)
class Candidate:
    """One configuration: a deployment (tp, pp) and one scheduler of its planned experiment."""

    tp: int
    pp: int
    scheduler: str  # its name in the deployment's plan (e.g. sarathi_b512)
    policy: str
    knob: int  # the value the grid varies (token budget, or max batch size): neighbours are close in it
    unit: Unit | None = None  # a disaggregated unit (tp, pp: its prefill role's); None: one colocated engine
    dp: int = 1  # data-parallel ranks sharing expert-parallel MoE layers (engines.perf.expert_parallel)

    @property
    def gpus(self) -> int:
        return self.unit.gpus if self.unit else self.tp * self.pp * self.dp

    @property
    def deployment(self) -> str:
        return self.unit.layout if self.unit else f"tp{self.tp}pp{self.pp}" + (f"dp{self.dp}ep" if self.dp > 1 else "")

    @property
    def layout(self) -> tuple[int, ...]:
        """Its key in Space.plans: (tp, pp), or (tp, pp, dp) for DP x EP."""
        return (self.tp, self.pp) if self.dp == 1 else (self.tp, self.pp, self.dp)

    @property
    def family(self) -> str:
        """What the search compares its ratios and warm starts within: the policy, apart for units."""
        return f"{self.policy}/pd" if self.unit else self.policy

    @property
    def key(self) -> str:
        return f"{self.deployment}/{self.scheduler}"


@dataclass(frozen=True)
class Misfit:
    tp: int
    pp: int
    reason: str
    dp: int = 1


@dataclass(frozen=True)
class Space:
    plans: dict[tuple[int, ...], ExperimentPlan]  # (tp, pp) or (tp, pp, dp) -> the experiment with every grid scheduler
    candidates: tuple[Candidate, ...]
    misfits: tuple[Misfit, ...]
    gpus_per_node: int
    max_gpus: int
    config: ExperimentConfig | None = None  # the experiment config the plans came from
    grid: dict = field(default_factory=dict)  # scheduler_grid: each scheduler's config node by name
    unit_plans: dict[Unit, ExperimentPlan] = field(default_factory=dict)  # plan.disaggregated: each unit's cluster
    unit_misfits: tuple[str, ...] = ()  # why P/D units were left out ('LAYOUT: reason'): plan's output lists them

    def plan_of(self, c: Candidate) -> ExperimentPlan:
        return self.unit_plans[c.unit] if c.unit else self.plans[c.layout]


def scheduler_grid(s: PlanSettings) -> dict[str, dict]:
    """Each scheduler the plan tries, by name, as a `scheduler.NAME` config node: every registered
    policy's declared sweep (register_policy(plan=...)), in registration order, its values as
    plan.grid sets them."""
    grid: dict[str, dict] = {}
    for policy in policy_names():
        sweep = policy_spec(policy).plan
        if sweep is not None:
            grid.update(sweep.nodes(policy, s.grid.get(policy, {})))
    return grid


def release_grid(grid: Mapping[str, dict], base: ExperimentConfig) -> dict[str, dict]:
    """The grid's release-following schedulers (vllm_v1) running the release the config names once
    (`release=vllm-X`, harness/settings/release.py): the plan names its schedulers itself, so a user
    cannot say `scheduler.NAME.release` of one. Only the rules follow: the batch flags stay the plan's
    sweep (a release's default flags would relabel a grid point). A shipped stack said without
    `release` (perf.stack=vllm-X) and a grid of such schedulers is refused, naming the word to type."""
    version = STACKS[base.perf.stack].release if base.perf.stack in STACKS else None
    rules = {name: {k.name: k.default for k in policy_spec(node["policy"]).knobs}.get("release")
             for name, node in grid.items()}
    follow = [name for name, default in rules.items() if default is not None]
    if version is None or not follow:
        return dict(grid)
    if base.release is None and any(str(grid[name].get("release", rules[name])) != version for name in follow):
        raise HarnessError(f"perf.stack={base.perf.stack} prices vLLM {version} but the plan's {', '.join(follow)} run "
                           f"their default release's rules: plan with release={base.perf.stack} in place of perf.stack "
                           f"(it sets both)")
    return {name: {**node, "release": version} if name in follow else dict(node) for name, node in grid.items()}


def check_grid_policies(grid: Mapping[str, dict], max_model_len: int) -> None:
    """Build each grid scheduler's policy: its constructor refuses a bad combination (vLLM V1's
    budget below its batch) as one line naming the plan.grid key, before any deployment is planned."""
    for name, node in grid.items():
        knobs = {k: v for k, v in node.items() if k != "policy"}
        try:
            make_policy(SchedulerConfig(node["policy"], **knobs), max_model_len)
        except ValueError as e:
            raise HarnessError(f"plan.grid.{node['policy']} ({name}): {e}") from None


def _knob(node: Mapping) -> int:
    """The value of the knob its policy's sweep steps along (neighbours are close in it)."""
    return int(node[policy_spec(node["policy"]).plan.knob])


def parallel_node(tp: int, pp: int, dp: int = 1) -> ParallelSettings:
    """The `parallel` section of a layout (DP ranks only with expert parallelism)."""
    return ParallelSettings(tp, pp) if dp == 1 else ParallelSettings(tp, pp, dp, ep=True)


def _layouts(base: ExperimentConfig, s: PlanSettings, limit: int):
    """(tp, pp, dp) of the grid up to `limit` GPUs; DP ranks (with EP) for MoE models at pp=1 only."""
    dps = sorted(set(int(d) for d in s.dp))
    if max(dps) > 1 and not get_model(base.model.name).is_moe:
        raise HarnessError(f"plan.dp={s.dp}: data-parallel ranks couple through expert-parallel MoE layers; "
                           f"{base.model.name} is dense (plan.dp=[1])")
    for dp in dps:
        for tp in sorted(set(int(t) for t in s.tp)):
            for pp in sorted(set(int(p) for p in s.pp)):
                if tp * pp * dp <= limit and (dp == 1 or pp == 1):
                    yield tp, pp, dp


def gpus_per_node(hardware: HardwareSettings) -> int:
    if is_cpu(hardware.gpu):  # this machine's CPU: no catalog GPU, the node build_deployment places it on
        return get_topology(hardware.topology or CPU_TOPOLOGY, None, hardware.gpus_per_node).gpus_per_node
    return get_topology(hardware.topology, get_gpu(hardware.gpu), hardware.gpus_per_node).gpus_per_node


def enumerate_space(base: ExperimentConfig, s: PlanSettings) -> Space:
    """Every (tp, pp) of the grid up to the replica's GPU limit, planned with every scheduler;
    those that do not fit are kept with their reason; with plan.disaggregated, the P/D units over
    the deployments that fit (harness.planner.units). No deployment fitting is bad input: the line
    names the smallest replica that would (more GPUs)."""
    if is_offline(base.arrival):  # an offline throughput run has no rate for the planner to find
        raise HarnessError(f"arrival={base.arrival['name']}: the planner searches request rates; plan with an "
                           "open-loop arrival (poisson, gamma, constant, trace)")
    per_node = gpus_per_node(base.hardware)
    limit = s.max_gpus or 2 * per_node
    grid = release_grid(scheduler_grid(s), base)
    check_grid_policies(grid, base.max_model_len)
    plans, misfits, candidates = {}, [], []
    for tp, pp, dp in _layouts(base, s, limit):
        c = replace(base, parallel=parallel_node(tp, pp, dp), scheduler=grid)
        layout = (tp, pp) if dp == 1 else (tp, pp, dp)
        try:
            plans[layout] = plan_experiment(c)
        except HarnessError as e:
            if _fits(base, tp, pp, dp):  # refused for the request (its SLO, its workload), not the deployment: say so
                raise
            misfits.append(Misfit(tp, pp, str(e), dp))
            continue
        candidates += [Candidate(tp, pp, name, node["policy"], _knob(node), dp=dp) for name, node in grid.items()]
    if not plans:
        raise HarnessError(_nothing_fits(base, s, limit, misfits))
    units, skipped = {}, []
    if s.disaggregated:
        units, found, skipped = enumerate_units(base, list(plans), grid, s.pd_policies, s.pd_max, limit)
        if not units:  # the user asked for P/D units and would silently get none: say why, run nothing
            least = min(layout[0] * layout[1] for layout in plans)
            why = skipped[0] if skipped else f"the smallest, 1 prefill + 1 decode instance of {least} GPU(s), is over plan.max_gpus={limit}"
            more = f" (and {len(skipped) - 1} more)" if len(skipped) > 1 else ""
            raise HarnessError(f"plan.disaggregated=true: no P/D unit of 1..{s.pd_max} prefill + decode instances "
                               f"up to {limit} GPUs can run: {why}{more}; nothing was run")
        candidates += [Candidate(u.prefill_tp, u.prefill_pp, name, node["policy"], _knob(node), u) for u, name, node in found]
    return Space(plans, tuple(candidates), tuple(misfits), per_node, limit, base, grid, units, tuple(skipped))


def _nothing_fits(config: ExperimentConfig, s: PlanSettings, limit: int, misfits: list[Misfit]) -> str:
    model, gpu = config.model.name, config.hardware.gpu
    why = misfits[-1].reason if misfits else f"no tp x pp of plan.tp={s.tp}, plan.pp={s.pp} is <= {limit} GPUs"
    # The (tp, pp) of the fewest GPUs past `limit` (up to 64) that holds the model
    shapes = sorted(((tp, pp) for tp in (1, 2, 4, 8, 16) for pp in (1, 2, 4, 8, 16) if limit < tp * pp <= 64),
                    key=lambda t: (t[0] * t[1], t[1]))
    smallest = next(((tp, pp) for tp, pp in shapes if _fits(config, tp, pp)), None)
    fix = (f"; it needs more GPUs: the smallest that fits is tp={smallest[0]} pp={smallest[1]} "
           f"({smallest[0] * smallest[1]} GPUs: plan.max_gpus={smallest[0] * smallest[1]}"
           f"{'' if smallest[0] in s.tp and smallest[1] in s.pp else f' plan.tp=[{smallest[0]}] plan.pp=[{smallest[1]}]'})"
           if smallest else "; no replica of up to 64 GPUs holds it: a GPU with more memory")
    return f"{model} fits on no deployment of up to {limit}x {gpu} ({why}){fix}"


def _fits(config: ExperimentConfig, tp: int, pp: int, dp: int = 1) -> bool:
    """Whether tp x pp (x dp) holds the model: placed, and KV room for one sequence of max_model_len."""
    try:
        deployment_of(config, parallel_node(tp, pp, dp))
        return True
    except HarnessError:
        return False
