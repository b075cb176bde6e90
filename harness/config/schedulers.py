"""A scheduler's Hydra schema, derived from its policy's constructor (the policy registry,
plugins included): `scheduler/NAME_schema` for presets to list (`- NAME_schema@_here_`), and
`scheduler=NAME` itself when experiments/scheduler has no NAME.yaml, so a new policy needs no YAML.
"""
from __future__ import annotations

import dataclasses
import typing
from dataclasses import field

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING as REQUIRED

from engines.core.config import per_scheduler_defaults
from engines.schedulers import PolicySpec, policy_names, policy_spec
from engines.schedulers.registry import REQUIRED as NO_DEFAULT
from harness.paths import CONFIG_DIR


def scheduler_schema(spec: PolicySpec) -> type:
    """The structured config of policy `spec`: `policy` (its name) and its knobs, typed, with the
    constructor's defaults (none: the config must set it); then the engine's settings a scheduler's
    entry may carry (engines.core.config.PER_SCHEDULER: `prefix_caching`), which go to its engine."""
    spec_fields = [("policy", str, field(default=spec.name))]
    for k in spec.knobs:
        kind = typing.Optional[k.kind] if k.optional else k.kind
        spec_fields.append((k.name, kind, field(default=REQUIRED if k.default is NO_DEFAULT else k.default)))
    spec_fields += [(name, type(default), field(default=default)) for name, default in per_scheduler_defaults().items()]
    return dataclasses.make_dataclass(f"{spec.name}_scheduler_schema", spec_fields)


def register_schedulers() -> None:
    cs = ConfigStore.instance()
    for name in policy_names():
        schema = scheduler_schema(policy_spec(name))
        cs.store(group="scheduler", name=f"{name}_schema", node=schema)
        if not (CONFIG_DIR / "scheduler" / f"{name}.yaml").is_file():  # a YAML of that name is its preset
            cs.store(group="scheduler", name=name, node=schema, package=f"scheduler.{name}")
