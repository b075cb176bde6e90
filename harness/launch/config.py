"""The launchers' configs (Hydra structured configs; docs/clusters.md): `hydra/launcher=joblib|ray|
submitit_local|submitit_slurm`, stored under the official plugins' names after their own
registration, so these win (a YAML file of the same name would be merged onto the plugin's
schema). `ray` and `submitit_*` keep the plugins' keys and run their job bodies; what they add is
each job's resource request (harness.launch.resources): a null field is derived per job, a set one
fixes it for every job."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra_plugins.hydra_joblib_launcher.config import JobLibLauncherConf

PLUGINS = "hydra_plugins.harness_launchers.launchers"


@dataclass
class JoblibConf(JobLibLauncherConf):
    n_jobs: int = 2  # jobs at once (the official default, -1, is one per core)


@dataclass
class RayConf:
    # ray.init's arguments; address null: a local Ray started for the run, `auto`: the cluster
    # started on this machine (`ray start --head`), HOST:PORT or ray://HOST:PORT: that cluster.
    init: dict[str, Any] = field(default_factory=lambda: {"address": None})
    remote: dict[str, Any] = field(default_factory=dict)  # extra ray.remote options for every job


@dataclass
class RayLauncherConf:
    _target_: str = f"{PLUGINS}.RayLauncher"
    ray: RayConf = field(default_factory=RayConf)
    live_gpus: bool = True
    check_resources: bool = True


@dataclass
class HarnessSweeperConf:
    _target_: str = f"{PLUGINS}.HarnessSweeper"
    max_batch_size: int | None = None
    params: dict[str, str] | None = None


@lru_cache(maxsize=1)
def _submitit_confs() -> dict[str, type]:
    try:
        from hydra_plugins.hydra_submitit_launcher.config import LocalQueueConf, SlurmQueueConf
    except ImportError:  # the cluster extra is not installed: hydra/launcher=submitit_* says so
        return {}
    out = {}
    for name, base, target in (("submitit_local", LocalQueueConf, "SubmititLocalLauncher"),
                               ("submitit_slurm", SlurmQueueConf, "SubmititSlurmLauncher")):
        @dataclass
        class Conf(base):  # type: ignore[misc, valid-type]
            _target_: str = f"{PLUGINS}.{target}"
            timeout_min: int | None = None  # null: derived from each job's probe count
            nodes: int | None = None  # null: the deployment's (live jobs on GPUs), else 1
            gpus_per_node: int | None = None  # null: the deployment's (live jobs on GPUs), else 0
            tasks_per_node: int | None = None  # null: 1 (the job's own process; other nodes' ranks hold their node)
            cpus_per_task: int | None = None  # null: search.workers (a local pool's probes), else 1
            live_gpus: bool = True
            check_resources: bool = True

        Conf.__name__ = Conf.__qualname__ = f"Harness{base.__name__}"
        out[name] = Conf
    return out


def register() -> None:
    from hydra.core.plugins import Plugins

    Plugins.instance()  # the plugins' own registrations happen first (once a process), so ours win
    cs = ConfigStore.instance()
    cs.store(group="hydra/launcher", name="joblib", node=JoblibConf, provider="harness")
    cs.store(group="hydra/launcher", name="ray", node=RayLauncherConf, provider="harness")
    for name, conf in _submitit_confs().items():
        cs.store(group="hydra/launcher", name=name, node=conf, provider="harness")
    cs.store(group="hydra/sweeper", name="harness", node=HarnessSweeperConf, provider="harness")
