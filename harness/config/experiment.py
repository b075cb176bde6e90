"""The door: the composed Hydra config as the typed `ExperimentConfig` (harness.settings), built
once here and handed down; nothing past it reads the mapping. A section's unknown key or wrong type
is one line naming it (`typed`); the backend's section becomes the chosen backend's own settings."""
from __future__ import annotations

from collections.abc import Mapping

from omegaconf import OmegaConf

from common.errors import HarnessError
from harness.settings.backend import BackendSettings
from harness.settings.backends import BACKEND_SETTINGS
from harness.settings.cluster import ClusterSettings
from harness.settings.deployment import HardwareSettings, ModelSettings, ParallelSettings, PerfSettings
from harness.settings.engine import EngineSettings
from harness.settings.experiment import ExperimentConfig
from harness.settings.offline import OfflineSettings
from harness.settings.release import with_release
from harness.settings.search import SearchSettings
from harness.settings.slo import SloSettings
from harness.typed import typed

# section -> its type; `where` in an error is the section's name
SECTIONS = {"model": ModelSettings, "hardware": HardwareSettings, "parallel": ParallelSettings, "perf": PerfSettings,
            "slo": SloSettings, "search": SearchSettings, "cluster": ClusterSettings, "offline": OfflineSettings,
            "engine": EngineSettings}
PLAIN = ("dataset", "arrival", "scheduler", "experiment")  # their shape is the option's (see ExperimentConfig)


def backend_settings(node: Mapping) -> BackendSettings:
    """`cfg.backend` as the chosen backend's settings (its `name` picks the backend)."""
    name = str(node.get("name", "sim"))
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
    sections = {k: typed(kind, data.get(k) or {}, k) for k, kind in SECTIONS.items()}
    plain = {k: data.get(k) or ({} if k != "experiment" else None) for k in PLAIN}
    rest = {k: data[k] for k in ("name", "seed", "results_dir", "progress", "cache", "release") if data.get(k) is not None}
    return with_release(ExperimentConfig(**sections, **plain, **rest, max_model_len=int(data["max_model_len"]),
                                         backend=backend_settings(data.get("backend") or {})))
