"""The experiment config: Hydra composes experiments/ (presets plus command-line overrides) onto
the structured schema (`schema`) into one resolved config (`compose`), which the door makes the
typed `ExperimentConfig` (`experiment_config`, harness.settings) that everything past it takes;
the launchers' and the sweeper's schemas (`hydra/launcher=...`) are harness.launch.config's."""
from harness.launch import config as _cluster_config
from harness.config import schema as _schema
from harness.config.compose import compose, config_for
from harness.config.experiment import experiment_config


def register() -> None:
    """Every schema in Hydra's ConfigStore (idempotent)."""
    _schema.register()
    _cluster_config.register()


def plan_experiment(cfg):
    """The planned experiment of a composed config (`compose(...)`): the door and the planning in one."""
    from harness.experiment import plan_experiment as plan

    return plan(experiment_config(cfg))


register()

__all__ = ["compose", "config_for", "experiment_config", "plan_experiment", "register"]
