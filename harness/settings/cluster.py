"""`cluster`: engine instances behind a router (colocated replicas, groups of other deployments,
or prefill and decode instances apart)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.settings.autoscale import AutoscaleSettings


@dataclass(frozen=True)
class ReplicaGroup:
    """`count` colocated instances of a deployment other than the experiment's: another GPU (its
    usual node, engines.perf.hardware) and/or another tp/pp; None keeps the experiment's."""

    count: int = 1
    gpu: str | None = None
    tp: int | None = None
    pp: int | None = None

    def __post_init__(self) -> None:
        for name in ("count", "tp", "pp"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"replicas: {name} must be >= 1, got {value}")


@dataclass(frozen=True)
class ClusterSettings:
    """Engine instances behind a router (the `cluster` config node).

    Colocated: `instances` replicas of the deployment, each its own scheduler and KV pool; `router`
    names an `engines.routers` policy. One instance is today's single engine, exactly.
    Disaggregated (`prefill_instances` and `decode_instances` both > 0): prefill instances run the
    experiment's scheduler on prompts only, decode instances continue each request after its KV
    moved over `kv_link` (None: the topology's path between the instances' GPUs, placed node by
    node as `placement` says) in `kv_transfer` mode (engines.perf.transfer). Each role's
    parallelism defaults to the experiment's; `decode_router` defaults to `router`."""

    instances: int = 1
    router: str = "round_robin"
    prefill_instances: int = 0
    decode_instances: int = 0
    prefill_tp: int | None = None
    prefill_pp: int | None = None
    decode_tp: int | None = None
    decode_pp: int | None = None
    kv_link: str | None = None
    kv_transfer: str = "after_prefill"
    placement: str = "by_role"  # by_role | interleaved (engines.perf.transfer)
    decode_router: str | None = None
    # The router's knobs (engines.routers: its constructor's parameters), e.g. {cache_threshold: 0.5}.
    # None: its defaults. `Any`, not a dict type: Hydra then takes `cluster.router_options={k: v}` whole.
    router_options: Any = None
    # Colocated instances of different deployments, group by group (their counts replace `instances`).
    replicas: list[ReplicaGroup] = field(default_factory=list)
    # Replicas added and removed during the run by a named policy (off by default; harness/backends/scaling.py).
    autoscale: AutoscaleSettings = field(default_factory=AutoscaleSettings)
    # Processes that simulate the instances (sim only): > 1 routes every request up front and runs
    # the instances apart when no routing decision reads instance state (sim/partition.py), the
    # same records; otherwise the one sequential loop, with the reason printed. 1: that loop always.
    workers: int = 1

    def __post_init__(self) -> None:
        from engines.perf.transfer import PLACEMENTS, TRANSFER_MODES
        from engines.routers import ROUTERS, make_router
        if not (isinstance(self.instances, int) and self.instances >= 1):
            raise ValueError(f"instances must be >= 1, got {self.instances}")
        if self.router_options is not None and not isinstance(self.router_options, Mapping):
            raise ValueError(f"router_options must be a mapping of the router's knobs, got {self.router_options!r}")
        make_router(self.router, **self.knobs)  # ValueError naming an unknown router, or an unknown or bad knob
        for name, known in (("decode_router", (None, *ROUTERS)), ("kv_transfer", TRANSFER_MODES), ("placement", PLACEMENTS)):
            if getattr(self, name) not in known:  # decode_router None: the router's
                raise ValueError(f"unknown {name} {getattr(self, name)!r}; known: {', '.join(filter(None, known))}")
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 1:
            raise ValueError(f"workers must be an integer >= 1 (1: one process), got {self.workers!r}")
        if self.prefill_instances < 0 or self.decode_instances < 0:
            raise ValueError(f"prefill_instances and decode_instances must be >= 0, got "
                             f"{self.prefill_instances}, {self.decode_instances}")
        if self.disaggregated and not (self.prefill_instances and self.decode_instances):
            raise ValueError(f"a disaggregated cluster needs at least one instance of each role, got "
                             f"prefill_instances={self.prefill_instances} decode_instances={self.decode_instances}")
        if self.disaggregated and self.instances != 1:
            raise ValueError(f"instances={self.instances} counts colocated replicas; a disaggregated cluster is "
                             "sized by prefill_instances and decode_instances (leave instances=1)")
        for name in ("prefill_tp", "prefill_pp", "decode_tp", "decode_pp"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if self.replicas and (self.instances != 1 or self.disaggregated):
            raise ValueError("replicas lists every colocated instance: leave instances=1 and no prefill/decode instances")
        a = self.autoscale
        if a.policy is not None and (self.disaggregated or self.replicas):
            raise ValueError("autoscale scales colocated replicas of the deployment (cluster.instances); "
                             "not prefill/decode instances or cluster.replicas")
        if a.policy is not None and not a.min_replicas <= self.instances <= a.max_replicas:
            raise ValueError(f"instances={self.instances} (the replicas a scaled run starts with) must be within "
                             f"[min_replicas, max_replicas] = [{a.min_replicas}, {a.max_replicas}]")

    @property
    def disaggregated(self) -> bool:
        return bool(self.prefill_instances or self.decode_instances)

    @property
    def knobs(self) -> dict[str, Any]:
        """The router's knobs as keyword arguments of engines.routers.make_router."""
        return dict(self.router_options or {})

    @property
    def num_instances(self) -> int:
        """Engine instances of the cluster, whatever its kind."""
        if self.disaggregated:
            return self.prefill_instances + self.decode_instances
        return sum(g.count for g in self.replicas) if self.replicas else self.instances

    def groups(self, gpu: str, tp: int, pp: int) -> list[tuple[int, str, int, int]]:
        """(count, gpu, tp, pp) of the colocated instances, given the experiment's deployment."""
        if not self.replicas:
            return [(self.instances, gpu, tp, pp)]
        return [(g.count, g.gpu or gpu, g.tp or tp, g.pp or pp) for g in self.replicas]

    def role_parallel(self, role: str, tp: int, pp: int) -> tuple[int, int]:
        """(tp, pp) of a prefill or decode instance, given the experiment's."""
        rtp, rpp = getattr(self, f"{role}_tp"), getattr(self, f"{role}_pp")
        return (tp if rtp is None else rtp, pp if rpp is None else rpp)

    def num_gpus(self, tp: int, pp: int) -> int:
        """GPUs the whole cluster uses, given the experiment's tp and pp."""
        if not self.disaggregated:
            return sum(n * gtp * gpp for n, _, gtp, gpp in self.groups("", tp, pp))
        (ptp, ppp), (dtp, dpp) = self.role_parallel("prefill", tp, pp), self.role_parallel("decode", tp, pp)
        return self.prefill_instances * ptp * ppp + self.decode_instances * dtp * dpp

    def describe(self, tp: int, pp: int, gpu: str = "") -> str:
        """'' for one engine; else e.g. '2 instances behind round_robin' or
        '1 prefill (tp2) + 3 decode (tp2) instances, KV after_prefill'."""
        if self.replicas:
            parts = [f"{n}x {g} tp{gtp}" + (f"pp{gpp}" if gpp > 1 else "") for n, g, gtp, gpp in self.groups(gpu, tp, pp)]
            return f"{' + '.join(parts)} behind {self.router}"
        if self.autoscale.policy is not None:
            a = self.autoscale
            return (f"{self.instances} instance{'s' if self.instances > 1 else ''} behind {self.router} at the start, autoscaled by {a.policy} "
                    f"within [{a.min_replicas}, {a.max_replicas}]")
        if not self.disaggregated:
            return f"{self.instances} instances behind {self.router}" if self.instances > 1 else ""

        def par(role: str) -> str:
            rtp, rpp = self.role_parallel(role, tp, pp)
            return f"tp{rtp}" + (f"pp{rpp}" if rpp > 1 else "")
        link = f" over {self.kv_link}" if self.kv_link else (", interleaved" if self.placement == "interleaved" else "")
        return (f"{self.prefill_instances} prefill ({par('prefill')}) + {self.decode_instances} decode ({par('decode')}) "
                f"instances, KV moved {self.kv_transfer}{link}")
