"""The experiment config: Hydra composes experiments/ (presets plus command-line overrides) onto
the structured schema (`schema`) into one resolved config (`compose`)."""
from harness.config.compose import compose
from harness.config.schema import register

register()

__all__ = ["compose", "register"]
