"""`cluster.autoscale`: replicas added and removed during a run (off unless `policy` is named);
harness.backends.scaling resolves it for one experiment (`ScalePlan`)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from engines.routers.autoscale import ScalePolicy

# A new replica's weights, read from a local PCIe 4.0 NVMe drive: 7,450 MB/s sequential read
# (Samsung 990 PRO datasheet, the fastest Gen4 x4 consumer drive); the drive, not the GPU's PCIe
# Gen4 x16 link (31.5 GB/s a direction: 16 GT/s x 16 lanes, 128b/130b), is the slower hop.
DEFAULT_LOAD_GBPS = 7.45
# On-demand price of one GPU-hour: AWS EC2 p4d.24xlarge (8x A100), us-east-1, Linux, $32.7726 an
# hour (aws.amazon.com/ec2/pricing/on-demand, 2024) / 8 GPUs. A knob: set your own.
DEFAULT_GPU_HOUR_USD = 32.7726 / 8


@dataclass(frozen=True)
class AutoscaleSettings:
    """`cluster.autoscale`: replicas added and removed during a run (None policy: a fixed fleet).
    The run starts with `cluster.instances` replicas serving (within [min, max])."""

    policy: str | None = None  # queue | kv | slo (engines/routers/autoscale.py)
    min_replicas: int = 1
    max_replicas: int = 8
    interval_s: float = 60.0  # a decision every interval_s; the metrics' window too
    window_s: float | None = None  # slo: attainment over the last window_s (None: interval_s)
    up_threshold: float | None = None  # None: the policy's default (DEFAULT_THRESHOLDS)
    down_threshold: float | None = None
    step: int = 1  # replicas added at once
    load_gbps: float = DEFAULT_LOAD_GBPS  # weight-load bandwidth per GPU, GB/s
    startup_s: float = 0.0  # a fixed start-up time on top of the load (engine init, graph capture)
    cold_start_s: float | None = None  # the whole cold start, given (None: bytes / load_gbps + startup_s)
    gpu_hour_usd: float = DEFAULT_GPU_HOUR_USD

    def __post_init__(self) -> None:
        if self.policy is None:
            return
        self.rule()  # ValueError naming a bad policy, bound or threshold
        checks = (("interval_s", self.interval_s, "> 0"), ("window_s", self.window_s, "> 0"),
                  ("load_gbps", self.load_gbps, "> 0"), ("startup_s", self.startup_s, ">= 0"),
                  ("cold_start_s", self.cold_start_s, ">= 0"), ("gpu_hour_usd", self.gpu_hour_usd, ">= 0"))
        for name, value, bound in checks:
            if value is None:  # window_s, cold_start_s: derived
                continue
            if not (math.isfinite(value) and (value > 0 if bound == "> 0" else value >= 0)):
                raise ValueError(f"autoscale.{name} must be a finite number {bound}, got {value}")

    def rule(self) -> ScalePolicy:
        return ScalePolicy(str(self.policy), self.min_replicas, self.max_replicas, self.up_threshold,
                           self.down_threshold, self.step)

    def cold_start(self, weight_bytes_per_gpu: int) -> float:
        if self.cold_start_s is not None:
            return float(self.cold_start_s)
        return weight_bytes_per_gpu / (self.load_gbps * 1e9) + self.startup_s
