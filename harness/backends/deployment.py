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
from engines.perf.hardware import get_gpu, get_topology
from engines.perf.kernels import get_stack
from engines.perf.transfer import KvTransfer, plan_kv_transfers
from engines.schedulers import SchedulerConfig


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


# The perf.* knobs a Deployment takes: the engine's kernels (engines.perf.kernels), how it sizes its
# KV cache (engines.perf.memory), the weights' and the KV cache's number format (engines.perf.precision),
# and whether a stack that captures CUDA graphs does (false: its kernels launched eagerly, launch.py).
# ep_comm: how an expert-parallel MoE layer moves tokens (engines.perf.expert_parallel.EP_COMMS).
DEPLOYMENT_KNOBS = ("stack", "attention_kernel", "kv_memory", "weight_dtype", "kv_dtype", "cuda_graphs", "ep_comm")
_BOOL_KNOBS = ("cuda_graphs",)


def _kernel_choice(perf_cfg: Mapping | None) -> dict:
    """The DEPLOYMENT_KNOBS the config names."""
    cfg = perf_cfg or {}
    return {k: (bool(cfg[k]) if k in _BOOL_KNOBS else str(cfg[k])) for k in DEPLOYMENT_KNOBS if cfg.get(k) is not None}


def build_deployment(
    model: Mapping, hardware: Mapping, parallel: Mapping, *, gpu_memory_utilization: float, block_size: int,
    max_model_len: int, perf_cfg: Mapping | None = None,
) -> DeploymentPlan:
    tp, pp = int(parallel["tp"]), int(parallel["pp"])
    dp, ep = int(parallel.get("dp", 1) or 1), bool(parallel.get("ep", False))
    if tp < 1 or pp < 1:
        raise HarnessError(f"parallel: tp and pp must be >= 1, got tp={tp} pp={pp}")
    gpu, topology = _device(hardware)
    # A CPU's BLAS has no GPU thread-block tile: a 4-row GEMM costs 4 rows, not 128 (deployment.py GEMM_TILE_TOKENS).
    cpu = {"gemm_tile_tokens": 1} if cpu_device.is_cpu(hardware.get("gpu")) else {}
    deployment = Deployment.create(
        dp=dp,
        ep=ep,
        model=str(model["name"]),
        gpu=gpu,
        tp=tp,
        pp=pp,
        topology=topology,
        gpus_per_node=hardware.get("gpus_per_node"),
        **_kernel_choice(perf_cfg), **cpu,
        **cpu_choice(str((perf_cfg or {}).get("cpu_costs") or "engine")),
    )
    calibration = _calibration(perf_cfg)
    if calibration is not None:
        deployment = calibration.apply(deployment)
    perf = build_perf_model(deployment, perf_cfg)
    kv_tokens = perf.kv_capacity_tokens(gpu_memory_utilization, int(block_size))
    ranks = f", dp={dp}, ep" if ep else ""
    if kv_tokens < max_model_len:
        raise HarnessError(
            f"{model['name']} on {tp * pp * dp}x {hardware['gpu']} (tp={tp}, pp={pp}{ranks}) leaves KV room for "
            f"{max(kv_tokens, 0)} tokens at gpu_memory_utilization={gpu_memory_utilization}: not one sequence of {max_model_len}"
        )
    device = cpu_device.describe(deployment.gpu) if cpu_device.is_cpu(hardware["gpu"]) else hardware["gpu"]
    desc = f"{model['name']} on {tp * pp * dp}x {device} (tp={tp}, pp={pp}{ranks})"
    if ep:
        desc += f", EP MoE over {deployment.ep_link.name if deployment.ep_link else 'one GPU'} ({deployment.ep_comm})"
    desc += "".join(f", {what} {dtype}" for what, dtype in (("weights", deployment.weight_dtype),
                                                           ("KV", deployment.kv_dtype)) if dtype)
    profile = getattr(perf, "profile", None)
    if profile is not None:
        desc += f", measured profile {profile.digest[:12]}"
    # A calibrated model never passes for the datasheet one: its description (every run's header,
    # summary.json's `deployment`) names the file, its factors and its held-out error.
    if calibration is not None:
        desc += f", {calibration.describe()}"
    return DeploymentPlan(str(model["name"]), str(hardware["gpu"]), tp, pp, desc, perf, perf, kv_tokens, int(block_size),
                          calibration, dp, ep)


def check_one_release(deployment: Deployment, schedulers: Mapping[str, SchedulerConfig]) -> None:
    """A shipped vLLM stack (perf.stack=vllm-X prices release X) and a `vllm_v1` scheduler running
    another release's rules (scheduler.NAME.release, default 0.32) would be two engines in one run:
    refused in one line until an engine release is one named choice of the config."""
    release = get_stack(deployment.stack).release
    if release is None:
        return
    for name, sc in schedulers.items():
        other = sc.release if sc.policy == "vllm_v1" else release
        if other != release:
            raise HarnessError(f"perf.stack={deployment.stack} prices vLLM {release} but scheduler.{name}.release="
                               f"{other} runs {other}'s scheduler: name one release (scheduler.{name}.release={release}, "
                               f"or perf.stack=vllm-{other})")


def _device(hardware: Mapping):
    """The catalog GPU's name, or this machine's CPU (engines/perf/cpu_device.py: the config's numbers,
    or a probe's), with the node it sits in (a CPU is one device: no links are ever priced)."""
    if not cpu_device.is_cpu(hardware.get("gpu")):
        return str(hardware["gpu"]), hardware.get("topology")
    spec = cpu_device.cpu_spec(hardware.get("cpu_flops"), hardware.get("cpu_bandwidth"), hardware.get("cpu_memory_bytes"))
    return spec, hardware.get("topology") or "pcie-only"


def _calibration(perf_cfg: Mapping | None) -> Calibration | None:
    path = (perf_cfg or {}).get("calibration")
    return None if path in (None, "") else load_calibration(str(path))


@dataclass(frozen=True)
class DisaggPlan:
    """A disaggregated cluster's roles: the deployment each prefill and each decode instance
    runs, and transfers[p][d], the pricing of a prompt's KV from prefill instance p to decode
    instance d (engines.perf.transfer)."""

    prefill: DeploymentPlan
    decode: DeploymentPlan
    transfers: tuple[tuple[KvTransfer, ...], ...]


def plan_disaggregation(
    cluster, model: Mapping, hardware: Mapping, parallel: Mapping, *, gpu_memory_utilization: float, block_size: int,
    max_model_len: int, perf_cfg: Mapping | None = None,
) -> DisaggPlan:
    """Each role's deployment (its own tp/pp, or the experiment's) and the KV transfers between
    them; `cluster` is the experiment's ClusterSettings (disaggregated)."""
    roles = {}
    for role in ("prefill", "decode"):
        tp, pp = cluster.role_parallel(role, int(parallel["tp"]), int(parallel["pp"]))
        try:
            roles[role] = build_deployment(model, hardware, {"tp": tp, "pp": pp}, gpu_memory_utilization=gpu_memory_utilization,
                                           block_size=block_size, max_model_len=max_model_len, perf_cfg=perf_cfg)
        except HarnessError as e:
            raise HarnessError(f"cluster: a {role} instance: {e}") from None
    topology = get_topology(hardware.get("topology"), get_gpu(str(hardware["gpu"])), hardware.get("gpus_per_node"))
    transfers = plan_kv_transfers(roles["prefill"].perf.deployment, roles["decode"].perf.deployment,
                                  cluster.prefill_instances, cluster.decode_instances, topology,
                                  link=cluster.kv_link, mode=cluster.kv_transfer, placement=cluster.placement)
    return DisaggPlan(roles["prefill"], roles["decode"], tuple(tuple(row) for row in transfers))


def plan_replicas(
    cluster, model: Mapping, hardware: Mapping, parallel: Mapping, *, gpu_memory_utilization: float, block_size: int,
    max_model_len: int, perf_cfg: Mapping | None = None,
) -> tuple[tuple[int, DeploymentPlan], ...]:
    """(count, deployment) of each group of `cluster.replicas`: another GPU comes in its usual node
    (engines.perf.hardware), the same GPU in the experiment's."""
    out = []
    for i, group in enumerate(cluster.replicas):
        hw = dict(hardware) if group.gpu in (None, hardware["gpu"]) else {"gpu": group.gpu}
        par = {"tp": group.tp or int(parallel["tp"]), "pp": group.pp or int(parallel["pp"])}
        try:
            d = build_deployment(model, hw, par, gpu_memory_utilization=gpu_memory_utilization, block_size=block_size,
                                 max_model_len=max_model_len, perf_cfg=perf_cfg)
        except HarnessError as e:
            raise HarnessError(f"cluster.replicas[{i}]: {e}") from None
        out.append((group.count, d))
    return tuple(out)
