"""`python -m harness figure=NAME|all [results_dir=results] [figures_dir=figures] [run_missing=true] [n_jobs=2]
[reference=results/reference] [include_other=false] [launcher=joblib] [hydra.launcher.KEY=VALUE ...]`

Regenerates figures/REPORT.md and every figure (or one: the names in every study's figures,
harness.analysis.studies.FIGURES); with run_missing, first runs, in simulation, the cells of every
study (harness.analysis.studies.STUDIES) that have no results yet. Runs not at the paper's settings are left out (and listed in the
report) unless include_other; cells without a run of the user's come from the reference runs.
"""
from __future__ import annotations

from common.errors import HarnessError
from harness.overrides import options as parse_options


def launcher_words(argv: list[str]) -> tuple[list[str], list[str]]:
    """(the command's own key=value words, the hydra.launcher.KEY=VALUE words for its launcher)."""
    own = [a for a in argv if not a.lstrip("+~").startswith("hydra.launcher.")]
    return own, [a for a in argv if a not in own]


def figure_command(argv: list[str]) -> int:
    from harness.analysis.figures import load_inputs
    from omegaconf import OmegaConf

    from harness.analysis.report import source_of, write_report
    from harness.analysis.settings import prime
    from harness.analysis.studies import FIGURES, run_order, study_of
    from harness.commands.jobs import compose_all, launcher_params, run_configs

    argv, launcher_overrides = launcher_words(argv)
    opts = parse_options(argv, {"figure": "all", "results_dir": "results", "figures_dir": "figures", "run_missing": True, "n_jobs": 2,
                                 "reference": "results/reference", "include_other": False, "launcher": "joblib"})
    names = [f.name for f in FIGURES]
    if opts["figure"] != "all" and opts["figure"] not in names:
        raise HarnessError(f"unknown figure {opts['figure']!r}; known: all, {', '.join(names)}")
    reference, other = opts["reference"] or None, opts["include_other"]
    if opts["run_missing"]:
        launcher_params(opts["launcher"], launcher_overrides)  # bad input before composing the matrix
        cells = run_order()  # the papers' own figures' cells first
        configs = compose_all([[*cell.overrides, f"results_dir={opts['results_dir']}", "progress=false"] for _, cell in cells],
                              n_jobs=opts["n_jobs"])
        prime({tuple(cell.overrides): OmegaConf.to_container(cfg, resolve=True) for (_, cell), cfg in zip(cells, configs)})
        run_configs(configs, n_jobs=opts["n_jobs"], launcher=opts["launcher"], launcher_overrides=launcher_overrides,
                    groups=[study.name for study, _ in cells])
    if opts["figure"] == "all":
        print(f"report: {write_report(opts['results_dir'], opts['figures_dir'], reference_dir=reference, include_other=other)}")
        return 0
    study = study_of(opts["figure"])
    inputs = load_inputs(opts["results_dir"], reference_dir=reference, include_other=other)
    source = source_of(inputs, opts["figures_dir"], results_dir=opts["results_dir"])
    for o in study.draw_figures(study.load(source), opts["figures_dir"], only=(opts["figure"],)):
        print(f"{o.name}: {o.path or 'skipped: ' + str(o.skipped)}")
    return 0
