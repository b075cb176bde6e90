"""The config schema: Hydra structured configs registered in the ConfigStore, which the YAML presets
in experiments/ fill in (each group file lists its schema first in `defaults`). A typo'd key or a
wrong type fails composition with the key named.

The typed values the harness plans with are frozen dataclasses, declared once: the sections of
`harness.settings.ExperimentConfig`, and each backend's own settings (its `Backend.settings`);
Hydra needs writable nodes, so the schema registered here is a mechanical non-frozen copy of each
(`schema_of`), defaults included.

A scheduler's schema comes from its policy's constructor (harness.config.schedulers).
"""
from __future__ import annotations

import dataclasses
import typing
from dataclasses import MISSING, dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING as REQUIRED  # "???": the config must set it

from harness.backends import BACKENDS, backend_class
from harness.config.schedulers import register_schedulers
from harness.settings.cluster import ClusterSettings
from harness.settings.deployment import HardwareSettings, ModelSettings, ParallelSettings, PerfSettings
from harness.settings.engine import EngineSettings
from harness.settings.offline import OfflineSettings
from harness.settings.search import SearchSettings
from harness.settings.slo import SloSettings

_SCHEMAS: dict[type, type] = {}


def schema_of(cls: type) -> type:
    """A non-frozen dataclass with `cls`'s fields, types and defaults (nested dataclasses too)."""
    if cls in _SCHEMAS:
        return _SCHEMAS[cls]
    hints = typing.get_type_hints(cls)
    spec = []
    for f in dataclasses.fields(cls):
        kind = hints[f.name]
        if dataclasses.is_dataclass(kind):
            inner = schema_of(kind)
            kind, default = inner, field(default_factory=inner)
        elif f.default_factory is not MISSING:
            default = field(default_factory=f.default_factory)
        elif f.default is not MISSING:
            default = field(default=f.default)
        else:
            default = field(default=REQUIRED)
        spec.append((f.name, kind, default))
    schema = dataclasses.make_dataclass(f"{cls.__name__}Schema", spec)
    _SCHEMAS[cls] = schema
    return schema


ModelSchema = schema_of(ModelSettings)
HardwareSchema = schema_of(HardwareSettings)
ParallelSchema = schema_of(ParallelSettings)


@dataclass
class DatasetSchema:
    name: str = REQUIRED
    trace_file: str | None = None  # None: the embedded length table (data/lengths)
    max_total_tokens: int | None = None  # requests with prompt + output over this are dropped
    sampling: str = "shuffle"  # shuffle | sequential (file order, for trace replay)
    synthetic: Any = None  # lengths from a sequence length and a P:D ratio (harness/workload/synthetic.py)
    sessions: Any = None  # conversations, agent transcripts, shared system prompts (harness/workload/sessions.py)


PerfSchema = schema_of(PerfSettings)
ClusterSchema = schema_of(ClusterSettings)
OfflineSchema = schema_of(OfflineSettings)
EngineSchema = schema_of(EngineSettings)


@dataclass
class ConfigSchema:
    """The primary config (experiments/config.yaml); groups whose options differ in shape
    (scheduler, arrival) are checked when the experiment is planned."""

    model: ModelSchema = REQUIRED
    hardware: HardwareSchema = REQUIRED
    parallel: ParallelSchema = REQUIRED
    dataset: DatasetSchema = REQUIRED
    arrival: Any = REQUIRED
    slo: Any = REQUIRED
    backend: Any = REQUIRED
    perf: PerfSchema = REQUIRED
    search: Any = REQUIRED
    scheduler: Any = REQUIRED
    cluster: ClusterSchema = field(default_factory=lambda: ClusterSchema())  # engine instances behind a router
    offline: OfflineSchema = field(default_factory=lambda: OfflineSchema())  # what an offline run reports (rate-free arrivals)
    engine: EngineSchema = field(default_factory=lambda: EngineSchema())  # engine-core switches (prefix caching)
    experiment: Any = None
    name: str = "custom"  # results go to ${results_dir}/${name}/<timestamp>/
    seed: int = 0  # workload lengths and arrival gaps
    results_dir: str = "results"
    max_model_len: int = REQUIRED
    progress: bool = True  # progress bars on stderr
    cache: bool = True  # reuse probes of an identical config and code (interrupted searches resume)
    release: str | None = None  # a shipped engine named once: release=vllm-0.19 (harness/settings/release.py)


def register() -> None:
    """Store every schema in Hydra's ConfigStore (idempotent)."""
    cs = ConfigStore.instance()
    cs.store(name="config_schema", node=ConfigSchema)
    cs.store(group="model", name="model_schema", node=ModelSchema)
    cs.store(group="hardware", name="hardware_schema", node=HardwareSchema)
    cs.store(group="parallel", name="parallel_schema", node=ParallelSchema)
    cs.store(group="dataset", name="dataset_schema", node=DatasetSchema)
    cs.store(group="perf", name="perf_schema", node=PerfSchema)
    cs.store(group="search", name="search_schema", node=schema_of(SearchSettings))
    cs.store(group="slo", name="slo_schema", node=schema_of(SloSettings))
    for name in BACKENDS:
        cs.store(group="backend", name=f"{name}_schema", node=schema_of(backend_class(name).settings))
    register_schedulers()
