"""The entry points: `python -m harness` runs an experiment (`run`), a figure (`figure`), the
nightly drift check (`nightly`) or a Hydra multirun (`multirun`); `jobs` runs many configs."""
