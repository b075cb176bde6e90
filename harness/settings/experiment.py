"""`ExperimentConfig`: one experiment's whole configuration, typed and frozen.

Built once at the door (`harness.config.experiment_config`, from the composed Hydra config) and
handed down: the planner of one experiment (`harness.experiment`), the deployment planner,
launch, validation. Nothing past the door reads the Hydra mapping. The Hydra schema registered in
`harness.config.schema` is derived from these sections (`schema_of`), so each key is declared once.

`arrival` and `dataset` stay plain mappings: their shape depends on the option chosen
(harness.workload checks them); `scheduler` maps each scheduler's name to its config as written
(its policy's constructor checks the knobs: harness.experiment.plan).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.settings.backend import BackendSettings
from harness.settings.cluster import ClusterSettings
from harness.settings.deployment import HardwareSettings, ModelSettings, ParallelSettings, PerfSettings
from harness.settings.engine import EngineSettings
from harness.settings.offline import OfflineSettings
from harness.settings.search import SearchSettings
from harness.settings.slo import SloSettings

# How an experiment runs, not what: where output goes, how many probes run at once and where, how many processes
# simulate a cluster (the same records). The probe cache's key leaves them out (harness.search.cache), and so do
# an experiment's finished run (harness.commands.jobs) and a run at its paper cell's settings (harness.analysis.settings).
HOW_NOT_WHAT = ("results_dir", "progress", "cache", "search.workers", "search.executor", "search.ray_address",
                "search.searches_at_once", "cluster.workers")


@dataclass(frozen=True, kw_only=True)
class ExperimentConfig:
    # In the order a saved config.yaml lists them (the Hydra schema keeps it: harness.config.schema).
    model: ModelSettings
    hardware: HardwareSettings
    parallel: ParallelSettings = field(default_factory=ParallelSettings)
    dataset: Mapping[str, Any]  # experiments/dataset: its name and how its lengths are drawn
    arrival: Mapping[str, Any]  # experiments/arrival: its name and knobs
    slo: SloSettings = field(default_factory=SloSettings)
    backend: BackendSettings = field(default_factory=BackendSettings)  # the chosen backend's own subclass
    perf: PerfSettings = field(default_factory=PerfSettings)
    search: SearchSettings = field(default_factory=SearchSettings)
    scheduler: Mapping[str, Mapping[str, Any]]  # name -> {policy, knobs}; entries without policy are skipped
    cluster: ClusterSettings = field(default_factory=ClusterSettings)
    offline: OfflineSettings = field(default_factory=OfflineSettings)
    engine: EngineSettings = field(default_factory=EngineSettings)
    experiment: Any = None  # the preset's own node (figure presets read it)
    name: str = "custom"  # results go to ${results_dir}/${name}/<timestamp>/
    seed: int = 0  # workload lengths and arrival gaps
    results_dir: str = "results"
    max_model_len: int
    progress: bool = True  # progress bars on stderr
    cache: bool = True  # reuse probes of an identical config and code (interrupted searches resume)
    # A shipped engine named once (release=vllm-0.19): its stack, scheduler rules and batch defaults
    # together (harness.settings.release, applied at the door); None: as perf and scheduler say.
    release: str | None = None

    def schedulers(self) -> dict[str, Mapping[str, Any]]:
        """The scheduler entries that name a policy (the others are a preset's knob overrides for a
        scheduler the command line deselected, e.g. `scheduler=[sarathi]`)."""
        return {str(k): v for k, v in self.scheduler.items() if v is not None and "policy" in v}
