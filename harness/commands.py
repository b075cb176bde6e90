"""The commands besides a single experiment: `figure=...` and `nightly`.

    python -m harness figure=all [results_dir=results] [figures_dir=figures] [run_missing=true] [n_jobs=2]
        regenerates figures/REPORT.md and every figure; first runs, in simulation, the cells of the
        paper's matrix that have no results yet (harness.analysis.matrix).
    python -m harness figure=NAME [...]         one figure (names: harness.analysis.figures.FIGURES)
    python -m harness nightly [results_dir=results/nightly] [reference=results/reference]
        [out=figures/DRIFT.md] [capacity_rel=0.05] [latency_rel=0.10] [n_jobs=2]
        re-runs every reference run's saved config into results_dir, compares, writes the drift
        report, exits 1 on drift (2 on bad input).
"""
from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from common.errors import HarnessError


def _options(argv: list[str], defaults: dict) -> dict:
    """KEY=VALUE options (harness.data's parser), each typed like its default."""
    from harness.data.config import parse_args

    out = dict(defaults)
    for key, value in parse_args(argv).items():
        if key not in defaults:
            raise HarnessError(f"unknown option {key}={value}; known: {', '.join(f'{k}=' for k in defaults)}")
        kind = type(defaults[key])
        try:
            out[key] = value.lower() in ("1", "true", "yes") if kind is bool else kind(value)
        except ValueError:
            raise HarnessError(f"{key} must be a {kind.__name__}, got {value!r}") from None
    return out


def figure_command(argv: list[str]) -> int:
    from harness.analysis.figures import FIGURES, build_figures, load_inputs
    from harness.analysis.matrix import paper_matrix
    from harness.analysis.report import write_report
    from harness.cli import compose
    from harness.matrix_runner import run_configs

    opts = _options(argv, {"figure": "all", "results_dir": "results", "figures_dir": "figures", "run_missing": True, "n_jobs": 2})
    names = [f.name for f in FIGURES]
    if opts["figure"] != "all" and opts["figure"] not in names:
        raise HarnessError(f"unknown figure {opts['figure']!r}; known: all, {', '.join(names)}")
    if opts["run_missing"]:
        configs = [compose([*cell.overrides, f"results_dir={opts['results_dir']}", "progress=false"]) for cell in paper_matrix()]
        run_configs(configs, n_jobs=opts["n_jobs"])
    if opts["figure"] == "all":
        print(f"report: {write_report(opts['results_dir'], opts['figures_dir'])}")
    else:
        for o in build_figures(load_inputs(opts["results_dir"]), opts["figures_dir"], only=(opts["figure"],)):
            print(f"{o.name}: {o.path or 'skipped: ' + str(o.skipped)}")
    return 0


def nightly_command(argv: list[str]) -> int:
    from harness.matrix_runner import run_configs
    from harness.nightly import Tolerances, run_nightly

    opts = _options(argv, {"results_dir": "results/nightly", "reference": "results/reference", "out": "figures/DRIFT.md",
                           "capacity_rel": 0.05, "latency_rel": 0.10, "n_jobs": 2})
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
    run_configs(configs, n_jobs=opts["n_jobs"])
    tol = Tolerances(capacity_rel=opts["capacity_rel"], latency_rel=opts["latency_rel"])
    return run_nightly(opts["results_dir"], ref, opts["out"], tol)
