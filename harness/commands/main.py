"""`python -m harness [overrides...]`: compose the Hydra config, run the experiment, save results.

Bad input (unknown experiment or scheduler, missing trace, invalid numbers, a mistyped key)
prints one line naming the problem and exits with status 2, before anything is written.
"""
from __future__ import annotations

import sys
from importlib import import_module

from common.errors import HarnessError, RunBroken
from harness.overrides import exits_2
from harness.paths import CONFIG_DIR

USAGE = """usage: python -m harness experiment=NAME [group=option ...] [key=value ...]

Runs a capacity search per scheduler in simulation and saves results/<name>/<timestamp>/.
Experiments: {experiments}
Schedulers (scheduler=[a,b,...]): {schedulers}
Config groups (group=option): {groups}
Figures (figure=NAME, or all): {figures}
Examples:
  python -m harness experiment=yi34b_tp2_strict
  python -m harness experiment=mistral7b_relaxed scheduler=[sarathi,vllm] search.num_requests=512
  python -m harness -m experiment=mistral7b_strict,yi34b_tp2_strict dataset=openchat_sharegpt4,arxiv_summarization
  python -m harness figure=all       # run what the paper's matrix misses, then figures/REPORT.md
  python -m harness nightly          # re-run results/reference configs, exit 1 on drift
  python -m harness plan model=llama3-70b hardware=h100_80g slo.tbt_s=0.1 target_qps=40   # plan a deployment
  python -m harness data stats dataset=openchat_sharegpt4      # dataset tools (python -m harness data --help)
  python -m harness profile model=tiny-llama quick=true        # operator profile on this device
  python -m harness calibrate run.jsonl model=M hardware=H scheduler=S --out cal.json   # fit to a measured run
  python -m harness validate run.jsonl model=M hardware=H scheduler=S perf.calibration=cal.json  # sim vs real
Every harness command reads key=value words (the engine's own tools, python -m engines.server and
python -m engines.perf, take --flags, as vllm serve does).
"""

# Tools with their own commands, reachable from the one entry point (also as python -m MODULE).
TOOLS = {
    "data": "harness.data.cli:main",
    "profile": "harness.profile.cli:main",
    "report": "harness.analysis.__main__:main",
}
# The harness's own commands with their own words and usage (`plan -h` is plan's); a broken run exits 3.
COMMANDS = {
    "plan": "harness.commands.plan:plan_command",
    "validate": "harness.commands.validate:validate_command",  # sim vs a measured run (harness/validate)
    "calibrate": "harness.commands.calibrate:calibrate_command",
}


def _usage() -> str:
    from harness.analysis.studies import FIGURES

    def options(group: str) -> str:
        # the group's YAML presets, and for schedulers every registered policy (harness.config.compose's
        # group_options says the same from Hydra's store, which --help does not load)
        names = {p.stem for p in (CONFIG_DIR / group).glob("*.yaml")}
        if group == "scheduler":
            from engines.schedulers.registry import policy_names

            names |= set(policy_names())
        return ", ".join(sorted(n for n in names if not n.endswith("_schema")))

    groups = "; ".join(f"{g}: {options(g)}" for g in ("model", "hardware", "parallel", "dataset", "arrival", "slo",
                                                      "backend", "perf", "search"))
    return USAGE.format(experiments=options("experiment"), schedulers=options("scheduler"), groups=groups,
                        figures=", ".join(f.name for f in FIGURES))


@exits_2
def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in TOOLS:  # each reads key=value words and answers --help itself
        module, _, func = TOOLS[argv[0]].partition(":")
        return getattr(import_module(module), func)(argv[1:])
    if not (argv and argv[0] in COMMANDS) and any(a in ("-h", "--help") for a in argv):
        print(_usage())
        return 0
    if not argv:  # nothing chosen: say what there is, run nothing
        print(_usage())
        raise HarnessError("no experiment chosen: name a preset with experiment=NAME (the main job: "
                           "experiment=yi34b_tp2_strict), or build your own from groups and name it with name=NAME")
    if argv[0] in ("-m", "--multirun"):
        from harness.commands.multirun import multirun

        return multirun(argv[1:])
    try:
        if argv[0] in COMMANDS:
            module, _, func = COMMANDS[argv[0]].partition(":")
            return getattr(import_module(module), func)(argv[1:])
        if argv[0] == "nightly":
            from harness.commands.nightly import nightly_command

            return nightly_command(argv[1:])
        if any(a.startswith("figure=") for a in argv):
            from harness.commands.figure import figure_command

            return figure_command(argv)
        from harness.commands.run import run_experiment  # here, not at the top: --help needs none of it
        from harness.config import compose

        run_experiment(compose(argv))
    except RunBroken as e:
        print(f"error: the run broke, nothing it measured is a result: {e}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print("interrupted: the run stays partial", file=sys.stderr)
        return 130
    return 0
