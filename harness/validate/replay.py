"""The measured stream replayed in the simulator: the same lengths at the same arrival offsets, on
the deployment and scheduler the command line names (or a harness run's saved config), priced by
the performance model with or without a calibration's factors."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from common.errors import HarnessError
from engines.perf import Deployment
from engines.perf.calibration import Calibration
from engines.perf.cpu_costs import frontend_costs
from engines.perf.factory import build_perf_model
from engines.schedulers import EngineConfig, SchedulerConfig, make_engine
from harness.backends.deployment import DeploymentPlan, check_one_release
from harness.backends.sim import simulate
from harness.backends.sim.data_parallel import simulate_vllm_dp
from harness.records import RequestRecord, RequestSpec
from harness.experiment import deployment_of, scheduler_configs
from harness.settings.experiment import ExperimentConfig

from .frontend import deliver
from .runfile import MeasuredRun


@dataclass(frozen=True, eq=False)
class Target:
    """What the simulator replays the run on."""

    plan: DeploymentPlan
    engine: EngineConfig  # the engine every replay builds
    scheduler_name: str
    config: ExperimentConfig

    @property
    def base(self) -> Deployment:
        return self.plan.perf.deployment

    @property
    def scheduler(self) -> SchedulerConfig:
        return self.engine.scheduler

    def describe(self) -> str:
        # the scheduler's entry as written: its knobs, then the engine's setting it carries
        knobs = ", ".join(f"{k}={v}" for k, v in (*self.scheduler.knobs, ("prefix_caching", self.engine.prefix_caching)))
        ranks = f" per rank (each of {self.plan.dp} DP ranks its own engine core)" if self.plan.dp > 1 else ""
        cpu = self.config.perf.cpu_costs or "engine"
        front = (f"; each token delivered after the API server's output processing (perf.cpu_costs={cpu})"
                 if frontend_costs(cpu) is not None else "")
        return (f"{self.plan.description}; {self.scheduler_name} ({self.scheduler.policy}: {knobs}); "
                f"KV {self.engine.kv_capacity_tokens} tokens{ranks}{front}")


def target_for(run: MeasuredRun, config: ExperimentConfig, kv_tokens: int | None = None) -> Target:
    if config.engine.kv_offload_gib:  # the replay below runs one engine without a tier: it would not be the run's
        raise HarnessError(f"{run.path}: engine.kv_offload_gib={config.engine.kv_offload_gib:g}: validate replays "
                           "without a host KV tier; set engine.kv_offload_gib=0")
    schedulers, caching = scheduler_configs(config)
    if run.scheduler is not None and run.scheduler in schedulers:
        schedulers = {run.scheduler: schedulers[run.scheduler]}
    if len(schedulers) != 1:
        raise HarnessError(f"name the engine's one scheduler, e.g. scheduler=sarathi scheduler.sarathi.token_budget=512 "
                           f"(this config has {', '.join(schedulers)})")
    (name, sched), = schedulers.items()
    max_model_len = config.max_model_len
    longest = max(run.records, key=lambda r: r.prompt_len + r.output_len)
    if longest.prompt_len + longest.output_len > max_model_len:
        raise HarnessError(f"{run.path}: request {longest.request_id} has {longest.prompt_len} + {longest.output_len} "
                           f"tokens, over max_model_len={max_model_len}: set max_model_len= the engine's")
    plan = deployment_of(config)
    check_one_release(plan.perf.deployment, {name: sched})
    kv = int(kv_tokens) if kv_tokens else plan.kv_capacity_tokens
    try:
        engine = EngineConfig(sched, kv, max_model_len, plan.block_size, prefix_caching=name in caching)
        make_engine(engine)
    except ValueError as e:
        raise HarnessError(f"scheduler {name}: {e}") from None
    return Target(plan, engine, name, config)


def specs_of(records: Sequence[RequestRecord]) -> list[RequestSpec]:
    return [RequestSpec(i, r.arrival_s, r.prompt_len, r.output_len) for i, r in enumerate(records)]


def replay(target: Target, records: Sequence[RequestRecord], calibration: Calibration | None = None) -> list[RequestRecord]:
    """The simulator's records of `records`, in their order; `calibration` replaces the target's own."""
    timer = target.plan.timer
    if calibration is not None:
        perf = target.config.perf
        timer = build_perf_model(calibration.apply(target.base), {"kind": perf.kind, "path": perf.path})
    if target.plan.dp > 1:  # one engine core per DP rank, each with its own limits and KV pool, as vLLM runs them
        sim = simulate_vllm_dp(specs_of(records), [target.engine] * target.plan.dp, timer)
    else:
        sim = simulate(specs_of(records), make_engine(target.engine), timer, pp=target.plan.pp)
    front = frontend_costs(target.config.perf.cpu_costs or "engine")
    return sim if front is None else deliver(sim, front)  # the API server's output processing, where measured


def kv_bound(target: Target, sim: Sequence[RequestRecord], given: bool) -> str | None:
    """A warning when the replay preempted requests (its KV pool bound it): the result then rests on
    the pool's size, which only the engine's own log states exactly (`given`: --kv-tokens was)."""
    preempted = sum(r.num_preemptions > 0 for r in sim)
    if not preempted:
        return None
    where = ("the --kv-tokens given" if given else
             "the model's estimate; pass the engine's own: vLLM logs \"GPU KV cache size: N tokens\", its scheduler "
             "has N less one block, its null block")
    return (f"warning: the replay was KV-bound: {preempted} of {len(sim)} requests preempted with a pool of "
            f"{target.engine.kv_capacity_tokens} tokens{' a rank' if target.plan.dp > 1 else ''} ({where})")
