"""The backend contract: what runs a probe's requests, for any search.

A backend serves one scheduler of one planned experiment (`BackendJob`). Entering it starts
whatever it needs (the live backend: a server process), leaving stops it; `run(requests)` sends
one probe's requests and returns one `RequestRecord` per request, in input order, plus
diagnostics (how far the run can be trusted, counters). Backends never compute summaries or
verdicts and never import the search: the search sees only `run`.

Each backend's settings are a dataclass on the settings floor (harness.settings.backends, the
schema of `experiments/backend/<name>.yaml`); a backend declares whether identical requests give
identical records (`deterministic`: only then may probes be cached and re-run for their token times).
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, TypeVar

from common.errors import HarnessError
from engines.core import EngineConfig
from engines.schedulers import SchedulerConfig
from harness.backends.deployment import DeploymentPlan, DisaggPlan
from harness.backends.scaling import ScalePlan
from harness.records import RequestRecord, RequestSpec
from harness.settings.backend import BackendSettings
from harness.settings.cluster import ClusterSettings

S = TypeVar("S", bound=BackendSettings)


@dataclass(frozen=True)
class GiveUp:
    """The paper's criterion as a backend may check it mid-probe (search.stop_early): the probe
    may stop once P{tbt_quantile} TBT > tbt_s or P{delay_quantile} scheduling delay > delay_s is
    certain whatever the rest of it does. num_tbt_samples: the probe's TBT samples in all."""

    tbt_s: float
    tbt_quantile: float
    delay_s: float
    delay_quantile: float

    def tbt_exceed_needed(self, num_samples: int) -> int:
        """Gaps over tbt_s that make the linear-interpolated quantile exceed it: the sorted sample
        at floor(q (n - 1)) is then over it, and the quantile is at least that sample."""
        return num_samples - math.floor(self.tbt_quantile * (num_samples - 1)) if num_samples else 1 << 62

    def late_needed(self, num_requests: int) -> int:
        """Requests late by more than delay_s that make the quantile ('higher' method: the sorted
        value at ceil(q (n - 1))) exceed it."""
        return num_requests - math.ceil(self.delay_quantile * (num_requests - 1))


@dataclass(frozen=True)
class BackendJob:
    """Everything a backend needs to serve one scheduler of a planned experiment."""

    scheduler_name: str
    scheduler: SchedulerConfig | None  # None: a server of its own (backend=endpoint) runs its own scheduler
    deployment: DeploymentPlan
    max_model_len: int
    seed: int
    settings: BackendSettings
    time_limit_s: float | None = None  # stop a probe at this time after its start
    concurrency: int | None = None  # closed-loop arrivals: at most this many requests outstanding
    progress: bool = True
    cluster: ClusterSettings = field(default_factory=ClusterSettings)
    disagg: DisaggPlan | None = None  # the roles' deployments when `cluster` is disaggregated
    replicas: tuple[tuple[int, DeploymentPlan], ...] = ()  # (count, deployment) per group of cluster.replicas
    give_up: GiveUp | None = None  # a backend may stop a probe whose failure is certain (search.stop_early)
    # An offline throughput run asks for the iteration log (diagnostics "iterations", "request_bubbles");
    # a backend that has none (a live server) leaves them out.
    iteration_log: bool = False
    # A probe with more failed requests than this share fails: a live backend stops it as soon as
    # that is certain (harness.loadgen: LoadOptions.max_error_fraction).
    max_error_fraction: float = 1.0
    # Live, without time_limit_s: a probe ends this long after its last planned arrival (what has
    # not finished then is cut off, as at a time limit): derived from the plan's SLO and lengths.
    drain_s: float | None = None
    kv_offload_gib: float = 0.0  # each engine instance's host KV tier (engine.kv_offload_gib); 0: none
    prefix_caching: bool = False  # each engine instance's (engine.prefix_caching or scheduler.NAME.prefix_caching)

    def engine_config(self, d: DeploymentPlan, role: str = "both", host_kv_blocks: int = 0) -> EngineConfig:
        """What each engine instance of deployment `d` is built with (ValueError names what it cannot run)."""
        assert self.scheduler is not None, "a server of its own (backend=endpoint) runs no engine of ours"
        return EngineConfig(self.scheduler, d.kv_capacity_tokens, self.max_model_len, d.block_size, role=role,
                            prefix_caching=self.prefix_caching, host_kv_blocks=host_kv_blocks)
    autoscale: ScalePlan | None = None  # cluster.autoscale resolved for this experiment; None: a fixed fleet

    def settings_as(self, kind: type[S]) -> S:
        if not isinstance(self.settings, kind):
            raise HarnessError(f"backend {kind.__name__} got {type(self.settings).__name__} settings")
        return self.settings


@dataclass(frozen=True)
class BackendRun:
    records: list[RequestRecord] = field(repr=False)
    diagnostics: Mapping[str, Any] = field(default_factory=dict)


class Backend(Protocol):
    name: ClassVar[str]
    deterministic: ClassVar[bool]

    def __init__(self, job: BackendJob) -> None: ...

    def __enter__(self) -> Backend: ...

    def __exit__(self, *exc: object) -> None: ...

    def run(self, requests: Sequence[RequestSpec], label: str = "") -> BackendRun: ...
