"""The experiment's configuration as typed, frozen sections (`ExperimentConfig`, `experiment`),
below everything that plans or runs it: it imports the engines' catalogs and defaults, nothing of
the harness past `harness.metrics`' constants. Every `*Settings` the Hydra schema is derived from
lives here, except each backend's own (declared by its backend, a subclass of `BackendSettings`)
and the planner's (`plan`: a command's own settings)."""
from harness.settings.experiment import ExperimentConfig

__all__ = ["ExperimentConfig"]
