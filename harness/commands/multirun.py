"""`python -m harness -m key=a,b ...`: Hydra multirun over experiment configs.

Sweeps (comma lists, `glob(...)`, `range(...)`) are expanded by Hydra and each job runs
`run_experiment` exactly as a single run does; the joblib launcher runs jobs in parallel
processes (`hydra.launcher.n_jobs`, default: one per core). A job with bad input prints its
one-line error and fails; the others go on.
"""
from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig, OmegaConf

from common.errors import HarnessError, RunBroken
from harness.config import register
from harness.paths import CONFIG_DIR

register()  # the structured schema the YAML presets fill in


@hydra.main(config_path=str(CONFIG_DIR), config_name="config", version_base=None)
def _job(cfg: DictConfig) -> None:
    from harness.commands.run import run_experiment

    OmegaConf.resolve(cfg)
    try:
        run_experiment(cfg)
    except HarnessError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    except RunBroken as e:
        print(f"error: the run broke, nothing it measured is a result: {e}", file=sys.stderr)
        raise SystemExit(3) from None


def multirun(argv: list[str]) -> int:
    sys.argv = ["python -m harness", "--multirun", *argv]
    try:
        _job()
    except SystemExit as e:
        return int(e.code or 0)
    return 0
