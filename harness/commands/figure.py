"""`python -m harness figure=NAME|all [results_dir=results] [figures_dir=figures] [run_missing=true] [n_jobs=2]`

Regenerates figures/REPORT.md and every figure (or one: names in harness.analysis.figures.FIGURES);
with run_missing, first runs, in simulation, the cells of the paper's matrix that have no results
yet (harness.analysis.matrix).
"""
from __future__ import annotations

from common.errors import HarnessError
from harness.overrides import options as parse_options


def figure_command(argv: list[str]) -> int:
    from harness.analysis.figures import FIGURES, build_figures, load_inputs
    from harness.analysis.matrix import paper_matrix
    from harness.analysis.report import write_report
    from harness.commands.jobs import run_configs
    from harness.config import compose

    opts = parse_options(argv, {"figure": "all", "results_dir": "results", "figures_dir": "figures", "run_missing": True, "n_jobs": 2})
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
