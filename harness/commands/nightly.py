"""`python -m harness nightly [results_dir=results/nightly] [reference=results/reference]
[out=figures/DRIFT.md] [capacity_rel=0.05] [latency_rel=0.10] [n_jobs=2] [launcher=joblib] [hydra.launcher.KEY=VALUE ...]`

Re-runs every reference run's saved config into results_dir, compares (harness.analysis.drift),
writes the drift report, exits 1 on drift (2 on bad input). The runs go through `launcher`, as
for `figure=all` (harness.commands.figure).
"""
from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from common.errors import HarnessError
from harness.overrides import options as parse_options


def nightly_command(argv: list[str]) -> int:
    from harness.analysis.drift import Tolerances, run_nightly
    from harness.commands.figure import launcher_words
    from harness.commands.jobs import launcher_params, run_configs

    argv, launcher_overrides = launcher_words(argv)
    opts = parse_options(argv, {"results_dir": "results/nightly", "reference": "results/reference", "out": "figures/DRIFT.md",
                           "capacity_rel": 0.05, "latency_rel": 0.10, "n_jobs": 2, "launcher": "joblib"})
    launcher_params(opts["launcher"], launcher_overrides)  # bad input before reading the reference
    ref = Path(opts["reference"])
    saved = sorted(ref.glob("*/*/config.yaml"))
    if not saved:
        raise HarnessError(f"no reference runs under {ref} (expected {ref}/<experiment>/<run>/config.yaml)")
    configs = []
    for path in saved:
        cfg = OmegaConf.load(path)
        cfg.results_dir = opts["results_dir"]
        cfg.progress = False
        configs.append(cfg)
    run_configs(configs, n_jobs=opts["n_jobs"], only_missing=False,  # today's numbers, never yesterday's
                launcher=opts["launcher"], launcher_overrides=launcher_overrides)
    tol = Tolerances(capacity_rel=opts["capacity_rel"], latency_rel=opts["latency_rel"])
    return run_nightly(opts["results_dir"], ref, opts["out"], tol)
