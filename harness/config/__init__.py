"""The experiment config: Hydra composes experiments/ (presets plus command-line overrides) onto
the structured schema (`schema`) into one resolved config (`compose`); the launchers' and the
sweeper's schemas (`hydra/launcher=...`) are harness.launch.config's."""
from harness.launch import config as _cluster_config
from harness.config import schema as _schema
from harness.config.compose import compose


def register() -> None:
    """Every schema in Hydra's ConfigStore (idempotent)."""
    _schema.register()
    _cluster_config.register()


register()

__all__ = ["compose", "register"]
