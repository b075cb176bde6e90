"""`python -m harness -m key=a,b ...`: Hydra multirun over experiment configs (docs/clusters.md).
Each job runs `run_experiment` as a single run does, wherever the launcher puts it, and returns a
`JobOutcome` (its run directory, or its one-line reason, and its host) instead of raising, so a
failing job never takes the others down; the sweeper (harness.launch.hydra_jobs) reports them."""
from __future__ import annotations

import os
import sys
import traceback
from importlib.util import find_spec

import hydra
from omegaconf import DictConfig, OmegaConf

from common.errors import HarnessError, RunBroken
from harness.launch.outcome import EXIT_BAD_INPUT, EXIT_BROKEN, EXIT_CRASHED, JobOutcome, first_line, here, secondary_task
import harness.config  # noqa: F401  (importing it registers the structured schema the YAML presets fill in)
from harness.paths import CONFIG_DIR

# What each launcher needs installed (the `cluster` extra: pip install -e '.[cluster]').
NEEDS = {"ray": ("ray", "hydra_plugins.hydra_ray_launcher"),
         "submitit": ("submitit", "hydra_plugins.hydra_submitit_launcher")}


@hydra.main(config_path=str(CONFIG_DIR), config_name="config", version_base=None)
def _job(cfg: DictConfig) -> JobOutcome:
    from hydra.core.hydra_config import HydraConfig

    from harness.commands.run import run_experiment

    if secondary_task():  # another node's task of a multi-node job: it holds its node, no more
        return JobOutcome(0, host=here())
    driver_cwd = HydraConfig.get().runtime.cwd
    if driver_cwd and os.path.isdir(driver_cwd):  # on another machine: relative paths as the driver meant
        os.chdir(driver_cwd)
    OmegaConf.resolve(cfg)
    try:
        return JobOutcome(0, run_dir=str(run_experiment(cfg, one_of_many=True)), host=here())
    except HarnessError as e:
        print(f"error: {e}", file=sys.stderr)
        return JobOutcome(EXIT_BAD_INPUT, error=first_line(e), host=here())
    except RunBroken as e:
        print(f"error: the run broke, nothing it measured is a result: {e}", file=sys.stderr)
        return JobOutcome(EXIT_BROKEN, error=f"the run broke: {first_line(e)}", host=here())
    except Exception as e:  # a bug: its traceback in the job's output, its name in the report
        traceback.print_exc()
        return JobOutcome(EXIT_CRASHED, error=f"{type(e).__name__}: {first_line(e)}", host=here())


def check_launcher(argv: list[str]) -> None:
    """hydra/launcher=NAME: a launcher there is, with the packages it needs installed (one line if not)."""
    from hydra.core.config_store import ConfigStore

    files = {p.stem: p.read_text() for p in (CONFIG_DIR / "hydra" / "launcher").glob("*.yaml")}
    stored = {n.removesuffix(".yaml") for n in ConfigStore.instance().list("hydra/launcher")}
    for a in argv:
        key, _, name = a.partition("=")
        if key.lstrip("+~") != "hydra/launcher":
            continue
        if name not in files and name not in {*stored, "submitit_local", "submitit_slurm"}:
            raise HarnessError(f"unknown launcher hydra/launcher={name}; known: {', '.join(sorted({*stored, *files}))}")
        base = name
        if name in files:  # an example cluster file: the launcher it extends
            base = next((k for k in NEEDS for line in files[name].splitlines() if line.strip().startswith(f"- {k}")), name)
        for kind, modules in NEEDS.items():
            missing = [m for m in modules if _absent(m)] if base.startswith(kind) else []
            if missing:
                raise HarnessError(f"hydra/launcher={name} needs {', '.join(missing)}: pip install -e '.[cluster]'")


def _absent(module: str) -> bool:
    try:
        return find_spec(module) is None
    except ModuleNotFoundError:
        return True


def multirun(argv: list[str]) -> int:
    check_launcher(argv)  # a HarnessError: main's one line and exit 2
    sys.argv = ["python -m harness", "--multirun", *argv]
    try:
        _job()
    except SystemExit as e:
        return int(e.code or 0)
    return 0
