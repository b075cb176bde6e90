"""The config schema: Hydra structured configs registered in the ConfigStore, which the YAML presets
in experiments/ fill in (each group file lists its schema first in `defaults`). A typo'd key or a
wrong type fails composition with the key named.

The typed values the harness plans with are frozen dataclasses, declared once: the sections of
`harness.settings.ExperimentConfig`, each backend's own settings among them;
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

from harness.config.compose import GROUPS
from harness.config.schedulers import register_schedulers
from harness.settings.backends import BACKEND_SETTINGS
from harness.settings.experiment import ExperimentConfig

_SCHEMAS: dict[type, type] = {}


def schema_of(cls: type) -> type:
    """A non-frozen dataclass with `cls`'s fields, types and defaults (nested dataclasses too)."""
    if cls not in _SCHEMAS:
        _SCHEMAS[cls] = dataclasses.make_dataclass(f"{cls.__name__}Schema", _fields(cls))
    return _SCHEMAS[cls]


def _fields(cls: type, kinds: dict | None = None) -> list[tuple]:
    """(name, type, default) of each field of `cls`, as `make_dataclass` takes them; `kinds` gives
    some fields another type (the primary config's loose groups)."""
    hints = {**typing.get_type_hints(cls), **(kinds or {})}
    spec = []
    for f in dataclasses.fields(cls):
        kind = hints[f.name]
        if dataclasses.is_dataclass(kind) and f.name not in (kinds or {}):
            inner = schema_of(kind)
            kind, default = inner, field(default_factory=inner)
        elif f.default_factory is not MISSING:
            default = field(default_factory=f.default_factory)
        else:  # no default: the config must set it
            default = field(default=REQUIRED if f.default is MISSING else f.default)
        spec.append((f.name, kind, default))
    return spec


@dataclass
class DatasetSchema:
    name: str = REQUIRED
    trace_file: str | None = None  # None: the embedded length table (data/lengths)
    max_total_tokens: int | None = None  # requests with prompt + output over this are dropped
    sampling: str = "shuffle"  # shuffle | sequential (file order, for trace replay)
    synthetic: Any = None  # lengths from a sequence length and a P:D ratio (harness/workload/synthetic.py)
    sessions: Any = None  # conversations, agent transcripts, shared system prompts (harness/workload/sessions.py)


# The primary config (experiments/config.yaml) is ExperimentConfig's fields, in its order (a saved
# config.yaml's). A group that config.yaml's defaults fill (compose.GROUPS) is required; groups whose
# options differ in shape (scheduler, arrival) or name their own schema in `defaults` (slo, search,
# backend) are `Any` here and checked when the experiment is planned.
LOOSE = {"arrival": Any, "slo": Any, "backend": Any, "search": Any, "scheduler": Any, "dataset": DatasetSchema}


ConfigSchema = dataclasses.make_dataclass("ConfigSchema", [
    (name, kind, field(default=REQUIRED) if name in GROUPS else default)
    for name, kind, default in _fields(ExperimentConfig, LOOSE)])


def register() -> None:
    """Store every schema in Hydra's ConfigStore (idempotent)."""
    cs = ConfigStore.instance()
    cs.store(name="config_schema", node=ConfigSchema)
    hints = typing.get_type_hints(ExperimentConfig)
    for group in GROUPS:  # each section a group's presets fill (the backend's: one schema an option, below)
        if dataclasses.is_dataclass(hints[group]) and group != "backend":
            cs.store(group=group, name=f"{group}_schema", node=schema_of(hints[group]))
    cs.store(group="dataset", name="dataset_schema", node=DatasetSchema)
    for name, settings in BACKEND_SETTINGS.items():
        cs.store(group="backend", name=f"{name}_schema", node=schema_of(settings))
    register_schedulers()
