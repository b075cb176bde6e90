"""`python -m harness figure=NAME|all [results_dir=results] [figures_dir=figures] [run_missing=true] [n_jobs=2]
[reference=results/reference] [include_other=false] [launcher=joblib] [hydra.launcher.KEY=VALUE ...]`

Regenerates figures/REPORT.md and every figure (or one: names in harness.analysis.figures.FIGURES and, for the
first Sarathi paper, harness.analysis.sarathi23.figures.FIGURES);
with run_missing, first runs, in simulation, the cells of the papers' matrices that have no results
yet (harness.analysis.matrix, harness.analysis.sarathi23.matrix). Runs not at the paper's settings are left out (and listed in the
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
    from harness.analysis.figures import FIGURES, build_figures, load_inputs
    from harness.analysis.matrix import paper_matrix
    from harness.analysis.report import write_report
    from harness.analysis.sarathi23 import figures as s23_figures
    from harness.analysis.sarathi23 import report as s23_report
    from harness.analysis.sarathi23.matrix import sarathi23_cells
    from harness.commands.jobs import launcher_params, run_configs
    from harness.config import compose

    argv, launcher_overrides = launcher_words(argv)
    opts = parse_options(argv, {"figure": "all", "results_dir": "results", "figures_dir": "figures", "run_missing": True, "n_jobs": 2,
                                 "reference": "results/reference", "include_other": False, "launcher": "joblib"})
    names = [f.name for f in FIGURES]
    s23_names = [f.name for f in s23_figures.FIGURES]  # the first Sarathi paper's (harness/analysis/sarathi23)
    names += s23_names
    if opts["figure"] != "all" and opts["figure"] not in names:
        raise HarnessError(f"unknown figure {opts['figure']!r}; known: all, {', '.join(names)}")
    reference, other = opts["reference"] or None, opts["include_other"]
    if opts["run_missing"]:
        launcher_params(opts["launcher"], launcher_overrides)  # bad input before composing the matrix
        cells = [*paper_matrix(), *sarathi23_cells()]
        configs = [compose([*cell.overrides, f"results_dir={opts['results_dir']}", "progress=false"]) for cell in cells]
        run_configs(configs, n_jobs=opts["n_jobs"], launcher=opts["launcher"], launcher_overrides=launcher_overrides)
    if opts["figure"] == "all":
        print(f"report: {write_report(opts['results_dir'], opts['figures_dir'], reference_dir=reference, include_other=other)}")
    elif opts["figure"] in s23_names:
        _, study = s23_report.load_study(opts["results_dir"], reference)
        for o in s23_report.build(study, opts["figures_dir"], only=(opts["figure"],)):
            print(f"{o.name}: {o.path or 'skipped: ' + str(o.skipped)}")
    else:
        inputs = load_inputs(opts["results_dir"], reference_dir=reference, include_other=other)
        for o in build_figures(inputs, opts["figures_dir"], only=(opts["figure"],)):
            print(f"{o.name}: {o.path or 'skipped: ' + str(o.skipped)}")
    return 0
