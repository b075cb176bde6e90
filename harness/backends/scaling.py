"""Autoscaling a colocated fleet (`cluster.autoscale`): the config node and what a backend needs.

`AutoscaleSettings` is the config (off unless `policy` is named); `ScalePlan` is it resolved for
one experiment: the decision rule (engines.routers.autoscale, the code a live router could share),
the cold start of a new replica (its weights read at `load_gbps` per GPU, each GPU its own shard
at once), the SLO the `slo` policy and the per-window attainment judge by, and the price of a
GPU-hour. Only the simulator scales so far (harness/backends/sim/autoscale.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from common.errors import HarnessError
from engines.routers.autoscale import ScalePolicy
from harness.settings.autoscale import AutoscaleSettings


@dataclass(frozen=True)
class ScalePlan:
    """Autoscaling as one experiment's backend runs it."""

    rule: ScalePolicy
    initial: int  # replicas serving at t = 0
    interval_s: float
    window_s: float
    cold_start_s: float
    tbt_s: float  # a TBT sample within this meets the SLO
    ttft_s: float  # a first token within this of the arrival meets it
    gpus_per_replica: int
    gpu_hour_usd: float


def scale_plan(settings: AutoscaleSettings, instances: int, deployment, slo) -> ScalePlan | None:
    """The plan for `settings` (None when off). `deployment`: a DeploymentPlan; `slo`: the
    experiment's Slo. TTFT is judged by slo.ttft_s, or, under the paper's criterion (which has no
    TTFT limit), by its scheduling-delay limit applied to the first token."""
    if settings.policy is None:
        return None
    d = deployment.perf.deployment
    per_gpu = max(d.model.stage_weight_bytes_per_gpu(d.tp, d.pp, d.weight_bytes_per_param, d.expert_shards))
    ttft = slo.ttft_s if slo.ttft_s is not None else slo.scheduling_delay_s
    return ScalePlan(settings.rule(), instances, float(settings.interval_s),
                     float(settings.window_s or settings.interval_s), settings.cold_start(per_gpu), float(slo.tbt_s),
                     float(ttft), deployment.gpus, float(settings.gpu_hour_usd))


def check_scaled_run(settings: AutoscaleSettings, backend: str, *, offline: bool) -> None:
    """What only a config with its workload and backend shows (HarnessError: one line, exit 2)."""
    if settings.policy is None:
        return
    if backend != "sim":
        raise HarnessError(f"cluster.autoscale: only backend=sim scales a fleet so far, not backend={backend} "
                           "(the live router serves a fixed set of replicas)")
    if offline:
        raise HarnessError("cluster.autoscale needs an open-loop arrival (arrival=diurnal, poisson, ...): an offline "
                           "run has no traffic to follow")
