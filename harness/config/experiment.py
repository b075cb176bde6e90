"""The door: the composed Hydra config as the typed `ExperimentConfig` (harness.settings), built
once here and handed down; nothing past it reads the mapping. A section's unknown key or wrong type
is one line naming it (`typed`); the backend's section becomes the chosen backend's own settings."""
from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping

from omegaconf import OmegaConf

from common.errors import HarnessError
from harness.settings.backend import BackendSettings
from harness.settings.backends import BACKEND_SETTINGS
from harness.settings.experiment import ExperimentConfig
from harness.settings.release import with_release
from harness.typed import typed


def backend_settings(node: Mapping) -> BackendSettings:
    """`cfg.backend` as the chosen backend's settings (its `name` picks the backend)."""
    name = str(node.get("name", BackendSettings.name))
    if name not in BACKEND_SETTINGS:
        raise HarnessError(f"unknown backend {name!r}; known: {', '.join(BACKEND_SETTINGS)}")
    return typed(BACKEND_SETTINGS[name], node, "backend")


def job_config(cfg: Mapping) -> ExperimentConfig | None:
    """A launcher's job config (with Hydra's own node) typed, or None where the harness refuses it:
    its job then fails on its own line and the others run (harness.launch.hydra_jobs)."""
    try:
        if OmegaConf.is_config(cfg):
            cfg = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
        return experiment_config(cfg)
    except Exception:
        return None


def experiment_config(cfg: Mapping) -> ExperimentConfig:
    """`cfg` (a composed config, or a saved one loaded back, or its plain dict) as the typed config."""
    data = OmegaConf.to_container(cfg, resolve=True) if OmegaConf.is_config(cfg) else dict(cfg)
    data.pop("hydra", None)
    values = {}
    for name, kind in typing.get_type_hints(ExperimentConfig).items():
        node = data.get(name)
        if name == "backend":  # the chosen backend's own settings
            values[name] = backend_settings(node or {})
        elif dataclasses.is_dataclass(kind):  # a section: a bad key or value is one line naming it
            values[name] = typed(kind, node or {}, name)
        elif typing.get_origin(kind) is Mapping:  # dataset, arrival, scheduler: their shape is the option's
            values[name] = node or {}
        elif node is not None and node != {}:  # as written (the Hydra schema typed it); else the default
            values[name] = node
    return with_release(ExperimentConfig(**{**values, "max_model_len": int(data["max_model_len"])}))
