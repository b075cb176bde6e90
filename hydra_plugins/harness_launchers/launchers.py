"""The harness's Hydra plugins (Hydra instantiates plugins from the hydra_plugins namespace only).

Thin: the work is in harness.launch.hydra_jobs. `RayLauncher` and `Submitit*Launcher` run each
job with the official plugins' job bodies (hydra-ray-launcher's `_run_job`, the
hydra-submitit-launcher's launcher as the submitted callable) and add a resource request per job
derived from its deployment, checked before anything is submitted. `HarnessSweeper` is Hydra's
basic sweeper that reports every job, done or failed, instead of stopping at the first failure.
Nothing heavy is imported here: Hydra imports this module on every start.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class _Launcher(Launcher):
    def __init__(self, **params: Any) -> None:
        self.params = params
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.task_function: TaskFunction | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function


class RayLauncher(_Launcher):
    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from harness.launch.hydra_jobs import launch_on_ray

        from harness.config.experiment import job_config

        return launch_on_ray(self, job_overrides, initial_job_idx, job_config)


class SubmititLocalLauncher(_Launcher):
    executor = "local"

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from harness.launch.hydra_jobs import launch_on_submitit

        from harness.config.experiment import job_config

        return launch_on_submitit(self, job_overrides, initial_job_idx, job_config)


class SubmititSlurmLauncher(SubmititLocalLauncher):
    executor = "slurm"


class HarnessSweeper(BasicSweeper):
    def sweep(self, arguments: list[str]) -> Any:
        from harness.launch.hydra_jobs import sweep_and_report

        return sweep_and_report(self, arguments)
