"""The backend contract: what runs a probe's requests, for any search.

A backend serves one scheduler of one planned experiment (`BackendJob`). Entering it starts
whatever it needs (the live backend: a server process), leaving stops it; `run(requests)` sends
one probe's requests and returns one `RequestRecord` per request, in input order, plus
diagnostics (how far the run can be trusted, counters). Backends never compute summaries or
verdicts and never import the search: the search sees only `run`.

Each backend declares its settings as a dataclass (`settings`, the schema of
`experiments/backend/<name>.yaml`) and whether identical requests give identical records
(`deterministic`: only then may probes be cached and re-run for their token times).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, TypeVar

from common.errors import HarnessError
from engines.core.block_manager import DEFAULT_BLOCK_SIZE
from engines.perf import DEFAULT_GPU_MEMORY_UTILIZATION
from engines.schedulers import SchedulerConfig
from harness.backends.deployment import DeploymentPlan
from harness.records import RequestRecord, RequestSpec


@dataclass(frozen=True)
class BackendSettings:
    """Fields every backend has (the planner reads the last two to size the KV pool)."""

    name: str = "sim"
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION
    block_size: int = DEFAULT_BLOCK_SIZE


S = TypeVar("S", bound=BackendSettings)


@dataclass(frozen=True)
class ClusterSettings:
    """Engine instances behind a router (the `cluster` config node): `instances` replicas of the
    deployment, each its own scheduler and KV pool; `router` names an `engines.routers` policy.
    One instance is today's single engine, exactly."""

    instances: int = 1
    router: str = "round_robin"

    def __post_init__(self) -> None:
        from engines.routers import ROUTERS
        if not (isinstance(self.instances, int) and self.instances >= 1):
            raise ValueError(f"instances must be >= 1, got {self.instances}")
        if self.router not in ROUTERS:
            raise ValueError(f"unknown router {self.router!r}; known: {', '.join(ROUTERS)}")


@dataclass(frozen=True)
class BackendJob:
    """Everything a backend needs to serve one scheduler of a planned experiment."""

    scheduler_name: str
    scheduler: SchedulerConfig
    deployment: DeploymentPlan
    max_model_len: int
    seed: int
    settings: BackendSettings
    time_limit_s: float | None = None  # stop a probe at this time after its start
    concurrency: int | None = None  # closed-loop arrivals: at most this many requests outstanding
    progress: bool = True
    cluster: ClusterSettings = field(default_factory=ClusterSettings)

    def settings_as(self, kind: type[S]) -> S:
        """The job's settings, checked to be the backend's own kind."""
        if not isinstance(self.settings, kind):
            raise HarnessError(f"backend {kind.__name__} got {type(self.settings).__name__} settings")
        return self.settings


@dataclass(frozen=True)
class BackendRun:
    records: list[RequestRecord] = field(repr=False)
    diagnostics: Mapping[str, Any] = field(default_factory=dict)


class Backend(Protocol):
    name: ClassVar[str]
    settings: ClassVar[type[BackendSettings]]
    deterministic: ClassVar[bool]

    def __init__(self, job: BackendJob) -> None: ...

    def __enter__(self) -> Backend: ...

    def __exit__(self, *exc: object) -> None: ...

    def run(self, requests: Sequence[RequestSpec], label: str = "") -> BackendRun: ...
