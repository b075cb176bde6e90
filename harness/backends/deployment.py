"""The deployment a backend serves: a model on GPUs with TP/PP, priced by the performance model.

Planned once from the config; the simulator prices iterations with `timer`, the live backend
starts servers for `model_name` on `gpu` with `tp` and gives its twin the same KV pool.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from common.errors import HarnessError
from engines.perf import Deployment, PerfModel
from engines.perf import cpu_device
from engines.perf.calibration import Calibration, load_calibration
from engines.perf.cpu_costs import cpu_choice
from engines.perf.factory import build_perf_model
from engines.perf.hardware import default_topology, get_gpu, get_topology
from engines.perf.kernels import get_stack
from engines.perf.transfer import KvTransfer, plan_kv_transfers
from engines.schedulers import SchedulerConfig
from harness.settings.deployment import DEPLOYMENT_KNOBS, HardwareSettings, ModelSettings, ParallelSettings, PerfSettings
from harness.settings.experiment import ExperimentConfig


@dataclass(frozen=True)
class DeploymentPlan:
    model_name: str
    gpu: str
    tp: int
    pp: int
    description: str
    perf: PerfModel
    timer: object  # batch_times(new_tokens, context_lens) -> seconds of one stage; pp_send_time(tokens)
    kv_capacity_tokens: int  # one engine's (one DP rank's)
    block_size: int
    calibration: Calibration | None = None  # perf.calibration: the user's fitted factors (engines/perf/calibration.py)
    dp: int = 1  # DP ranks stepping together (ep: engines.perf.expert_parallel); timer.step_time prices a step
    ep: bool = False

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp


def build_deployment(model: ModelSettings, hardware: HardwareSettings, parallel: ParallelSettings, *,
                     gpu_memory_utilization: float, block_size: int, max_model_len: int,
                     perf: PerfSettings = PerfSettings()) -> DeploymentPlan:
    tp, pp, dp, ep = parallel.tp, parallel.pp, parallel.dp, parallel.ep  # Deployment.create refuses tp or pp < 1
    gpu, topology, cpu = hardware.gpu, hardware.topology, {}
    if cpu_device.is_cpu(hardware.gpu):  # this machine's CPU (engines/perf/cpu_device.py: the config's numbers, or a
        # probe's) in its node (one device: no links are ever priced); a CPU's BLAS has no GPU thread-block tile, so a
        # 4-row GEMM costs 4 rows, not 128 (deployment.py GEMM_TILE_TOKENS).
        gpu = cpu_device.cpu_spec(hardware.cpu_flops, hardware.cpu_bandwidth, hardware.cpu_memory_bytes)
        topology, cpu = hardware.topology or CPU_TOPOLOGY, {"gemm_tile_tokens": 1}
    knobs = {k: getattr(perf, k) for k in DEPLOYMENT_KNOBS if getattr(perf, k) is not None}  # as set
    deployment = Deployment.create(dp=dp, ep=ep, model=model.name, gpu=gpu, tp=tp, pp=pp, topology=topology,
                                   gpus_per_node=hardware.gpus_per_node, **knobs, **cpu,
                                   **cpu_choice(perf.cpu_costs or "engine"))
    calibration = None if perf.calibration in (None, "") else load_calibration(perf.calibration)
    if calibration is not None:
        deployment = calibration.apply(deployment)
    model_perf = build_perf_model(deployment, {"kind": perf.kind, "path": perf.path})
    kv_tokens = model_perf.kv_capacity_tokens(gpu_memory_utilization, int(block_size))
    ranks = f", dp={dp}, ep" if ep else ""
    if kv_tokens < max_model_len:
        raise HarnessError(f"{model.name} on {tp * pp * dp}x {hardware.gpu} (tp={tp}, pp={pp}{ranks}) leaves KV room "
                           f"for {max(kv_tokens, 0)} tokens at gpu_memory_utilization={gpu_memory_utilization}: not "
                           f"one sequence of {max_model_len}")
    device = cpu_device.describe(deployment.gpu) if cpu_device.is_cpu(hardware.gpu) else hardware.gpu
    desc = f"{model.name} on {tp * pp * dp}x {device} (tp={tp}, pp={pp}{ranks})"
    if ep:
        desc += f", EP MoE over {deployment.ep_link.name if deployment.ep_link else 'one GPU'} ({deployment.ep_comm})"
    desc += "".join(f", {what} {dtype}" for what, dtype in (("weights", deployment.weight_dtype),
                                                           ("KV", deployment.kv_dtype)) if dtype)
    profile = getattr(model_perf, "profile", None)
    if profile is not None:
        desc += f", measured profile {profile.digest[:12]}"
    # A calibrated model never passes for the datasheet one: its description (every run's header,
    # summary.json's `deployment`) names the file, its factors and its held-out error.
    if calibration is not None:
        desc += f", {calibration.describe()}"
    return DeploymentPlan(model.name, hardware.gpu, tp, pp, desc, model_perf, model_perf, kv_tokens, int(block_size),
                          calibration, dp, ep)


def check_one_release(deployment: Deployment, schedulers: Mapping[str, SchedulerConfig]) -> None:
    """A shipped vLLM stack (perf.stack=vllm-X prices release X) and a `vllm_v1` scheduler running
    another release's rules (scheduler.NAME.release, default 0.32) would be two engines in one run:
    refused in one line naming the one choice that says both (`release=vllm-X`, harness/settings/release.py)."""
    release = get_stack(deployment.stack).release
    if release is None:
        return
    for name, sc in schedulers.items():
        other = sc.release if sc.policy == "vllm_v1" else release
        if other != release:
            raise HarnessError(f"perf.stack={deployment.stack} prices vLLM {release} but scheduler.{name}.release="
                               f"{other} runs {other}'s scheduler: name the engine once, release=vllm-{release} or "
                               f"release=vllm-{other}, in place of perf.stack and scheduler.{name}.release")


CPU_TOPOLOGY = default_topology("cpu")  # the node a CPU device sits in (engines.perf.hardware)


@dataclass(frozen=True)
class DisaggPlan:
    """A disaggregated cluster's roles: the deployment each prefill and each decode instance
    runs, and transfers[p][d], the pricing of a prompt's KV from prefill instance p to decode
    instance d (engines.perf.transfer)."""

    prefill: DeploymentPlan
    decode: DeploymentPlan
    transfers: tuple[tuple[KvTransfer, ...], ...]


def deployment_of(config: ExperimentConfig, parallel: ParallelSettings | None = None,
                  hardware: HardwareSettings | None = None) -> DeploymentPlan:
    """The experiment's deployment (or another layout or GPU of it), priced."""
    return build_deployment(config.model, hardware or config.hardware, parallel or config.parallel,
                            gpu_memory_utilization=config.backend.gpu_memory_utilization,
                            block_size=config.backend.block_size, max_model_len=config.max_model_len, perf=config.perf)


def plan_disaggregation(config: ExperimentConfig) -> DisaggPlan:
    """Each role's deployment (its own tp/pp, or the experiment's) and the KV transfers between
    them, for a disaggregated `config.cluster`."""
    cluster, hardware, roles = config.cluster, config.hardware, {}
    for role in ("prefill", "decode"):
        try:
            roles[role] = deployment_of(config, ParallelSettings(*cluster.role_parallel(role, config.parallel.tp,
                                                                                      config.parallel.pp)))
        except HarnessError as e:
            raise HarnessError(f"cluster: a {role} instance: {e}") from None
    topology = get_topology(hardware.topology, get_gpu(hardware.gpu), hardware.gpus_per_node)
    transfers = plan_kv_transfers(roles["prefill"].perf.deployment, roles["decode"].perf.deployment,
                                  cluster.prefill_instances, cluster.decode_instances, topology,
                                  link=cluster.kv_link, mode=cluster.kv_transfer, placement=cluster.placement)
    return DisaggPlan(roles["prefill"], roles["decode"], tuple(tuple(row) for row in transfers))


def plan_replicas(config: ExperimentConfig) -> tuple[tuple[int, DeploymentPlan], ...]:
    """(count, deployment) of each group of `config.cluster.replicas`: another GPU comes in its
    usual node (engines.perf.hardware), the same GPU in the experiment's."""
    out, hardware, parallel = [], config.hardware, config.parallel
    for i, group in enumerate(config.cluster.replicas):
        hw = hardware if group.gpu in (None, hardware.gpu) else HardwareSettings(group.gpu)
        try:
            d = deployment_of(config, ParallelSettings(group.tp or parallel.tp, group.pp or parallel.pp), hw)
        except HarnessError as e:
            raise HarnessError(f"cluster.replicas[{i}]: {e}") from None
        out.append((group.count, d))
    return tuple(out)
