"""Run many experiment configs, in parallel, skipping those that already have a finished run.

A config is identified by its resolved `config.yaml` (less where output goes): a run directory
whose saved config is identical is that config's finished run. Used by `figure=all` (run what
the report misses) and `nightly` (re-run every reference run's saved config).
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from common.errors import HarnessError, RunBroken
from harness.results.config_diff import differences
from harness.settings.experiment import HOW_NOT_WHAT


def find_run(cfg: DictConfig) -> Path | None:
    """The newest finished run of this config under cfg.results_dir, if any: the same experiment,
    every setting both have agrees, except where output goes (harness.results.config_diff: a key
    only one side has is a knob added since the other was saved)."""
    base = Path(cfg.results_dir) / str(cfg.name)
    if not base.is_dir():
        return None
    for run in sorted((d for d in base.iterdir() if not d.name.startswith(".")), reverse=True):
        saved = run / "config.yaml"
        if (run / "summary.json").exists() and saved.exists() and not differences(
                OmegaConf.to_container(OmegaConf.load(saved), resolve=True), OmegaConf.to_container(cfg, resolve=True),
                HOW_NOT_WHAT):
            return run
    return None


def _run_one(cfg_yaml: str, cwd: str | None = None) -> tuple[str, str | None, str, str]:
    """(name, run dir or None if it failed, everything it printed, host): jobs run side by side,
    so their output is kept and printed whole when each ends, never interleaved. `cwd`: the
    driver's directory, where relative paths point (when this machine sees it)."""
    import contextlib
    import io
    import os
    import traceback

    from harness.launch.outcome import here
    from harness.commands.run import run_experiment

    if cwd and os.path.isdir(cwd):
        os.chdir(cwd)
    cfg = OmegaConf.create(cfg_yaml)
    out = io.StringIO()
    path = None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            path = str(run_experiment(cfg, one_of_many=True))
        except (HarnessError, RunBroken) as e:
            print(f"error: {e}")
        except Exception:  # one job's crash must not take the others' results with it
            traceback.print_exc()
    return str(cfg.name), path, out.getvalue(), here()


def run_configs(configs: Sequence[DictConfig], n_jobs: int = 2, only_missing: bool = True,
                launcher: str = "joblib", launcher_overrides: Sequence[str] = (),
                groups: Sequence[str] | None = None) -> list[Path]:
    """Run every config without a finished run (all of them if not `only_missing`); returns run
    dirs. `launcher`: where the jobs run, a `hydra/launcher=` option (joblib: `n_jobs` local
    processes; ray, submitit_local, submitit_slurm or a cluster file: each job with the resources
    its deployment needs, all checked before any is submitted), `launcher_overrides` its
    `hydra.launcher.KEY=VALUE` words. Each job's output prints as one labelled block when it
    ends; a job that fails is named after all have run (HarnessError), and a rerun does only what
    is still missing. `groups` (one label a config, e.g. its study): each job's line also says how
    many configs of each group are still to run, so a long run says what is left."""
    # by position: `c in todo` compares whole configs, ~3 CPU s for figure=all's before any job starts
    found = [find_run(c) if only_missing else None for c in configs]
    todo = [c for c, run in zip(configs, found) if run is None]
    left = _Left([g for g, run in zip(groups, found) if run is None] if groups is not None else None, todo)
    done = [run for run in found if run is not None]
    print(f"matrix: {len(configs)} configs, {len(configs) - len(todo)} already have results, running {len(todo)}"
          + ("" if launcher == "joblib" else f" through hydra/launcher={launcher}"), flush=True)
    failed = []
    if todo:
        for k, (name, path, text, host) in enumerate(_jobs(todo, n_jobs, launcher, launcher_overrides), 1):
            status = f"done on {host}" if path else f"FAILED on {host}" if host else "FAILED"
            print(f"\n── [{k}/{len(todo)}] {name}: {status}{left.after(name)} " + "─" * max(0, 60 - len(name)), flush=True)
            print(text.rstrip(), flush=True)
            if path:
                done.append(Path(path))
            else:
                failed.append(name)
    if failed:
        raise HarnessError(f"{len(failed)} of {len(todo)} configs failed: {', '.join(failed)} (their output is above; "
                           f"the others' results are saved, and a rerun runs only what is missing)")
    return done


class _Left:
    """What is still to run, by group, as jobs end. They end in any order and report only their
    name, which configs may share (an experiment run on two datasets, or by two studies): each
    name is counted as often as it runs."""

    def __init__(self, groups: Sequence[str] | None, todo: Sequence[DictConfig]) -> None:
        self.of: dict[str, list[str]] = {}
        self.count: dict[str, int] = {}
        for c, g in zip(todo, groups if groups is not None else ()):
            self.of.setdefault(str(c.name), []).append(g)
            self.count[g] = self.count.get(g, 0) + 1

    def after(self, name: str) -> str:
        """"; left: serve 3, fleet 14" once `name` ended ("" without groups; "; none left" at the end)."""
        if not self.of.get(name):
            return ""
        g = self.of[name].pop(0)
        self.count[g] -= 1
        rest = ", ".join(f"{k} {n}" for k, n in self.count.items() if n)
        return f"; left: {rest}" if rest else "; none left"


def compose_all(overrides: Sequence[Sequence[str]], n_jobs: int = 2) -> list[DictConfig]:
    """Each override list's composed config, `n_jobs` at a time: Hydra takes ~0.15 CPU s a config,
    ~20 s for figure=all's cells one after another while the second core idles. The processes are
    the ones `run_configs` runs its jobs in next (joblib's loky pool is kept for the same n_jobs)."""
    from harness.config import compose

    if n_jobs <= 1 or len(overrides) < 2:
        return [compose(list(o)) for o in overrides]
    from joblib import Parallel, delayed

    # in batches: one task a config would pay a round trip each for a fraction of a second's work
    return Parallel(n_jobs=n_jobs, backend="loky", batch_size=max(1, len(overrides) // (4 * n_jobs)))(
        delayed(compose)(list(o)) for o in overrides)


def launcher_params(launcher: str, overrides: Sequence[str]) -> dict:
    """The launcher's resolved settings ({} for the default joblib without overrides); one line
    and exit 2 for an unknown launcher or key. Commands call it before composing their configs, so
    bad input is refused in a moment, not after minutes of composing a matrix."""
    from harness.config.compose import compose_launcher

    return compose_launcher(launcher, list(overrides)) if launcher != "joblib" or overrides else {}


# What a simulated probe's records do not depend on, only its verdict (and where output goes):
# configs that differ in nothing else run as one job, sharing their probes (harness.search.probe.SharedProbes).
# The schedulers' settings may differ too: a probe is shared only with the same scheduler's same settings.
JUDGED_ONLY = ("slo", "name")
PER_SCHEDULER = "scheduler"


def simulation_key(cfg: DictConfig) -> str | None:
    """Configs with the same key simulate the same probes of a scheduler with the same settings
    (they differ only in JUDGED_ONLY, HOW_NOT_WHAT and their schedulers); None for one whose SLO reaches its simulation (an early stop judges mid-run, an
    SLO autoscaler reads attainment) or that measures a server (no simulation to share)."""
    import json

    c = OmegaConf.to_container(cfg, resolve=True)
    if (c.get("backend") or {}).get("name") != "sim" or (c.get("search") or {}).get("stop_early") \
            or ((c.get("cluster") or {}).get("autoscale") or {}).get("policy"):
        return None
    for key in (*JUDGED_ONLY, PER_SCHEDULER, *HOW_NOT_WHAT):
        *path, last = key.split(".")
        node = c
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(last, None)
    return json.dumps(c, sort_keys=True, default=str)


def _groups(todo: Sequence[DictConfig]) -> list[list[int]]:
    """`todo`'s indices, those with the same simulation_key together (at the first one's place)."""
    groups: dict[object, list[int]] = {}
    for i, c in enumerate(todo):
        key = simulation_key(c)
        groups.setdefault(key if key is not None else ("alone", i), []).append(i)
    return list(groups.values())


def _run_group(args: Sequence[tuple[str, str | None]]) -> list[tuple[str, str | None, str, str]]:
    """`_run_one` of each config, one after another in this process, sharing their probes (their
    simulation_key is the same): each config's output says how many of its probes it shared."""
    from harness.search.probe import shared_probes

    import json

    out = []
    with shared_probes() as shared:
        for cfg_yaml, cwd in args:
            schedulers = OmegaConf.to_container(OmegaConf.create(cfg_yaml), resolve=True).get(PER_SCHEDULER) or {}
            shared.settings = {str(k): json.dumps(v, sort_keys=True, default=str) for k, v in schedulers.items()}
            before = shared.hits
            name, path, text, host = _run_one(cfg_yaml, cwd)
            if shared.hits > before:
                text += (f"\nnote: {shared.hits - before} probes were simulated once for this run and another that "
                         "differs only in its SLO (the same scheduler and settings: the same records; each is "
                         "judged by its own SLO)")
            out.append((name, path, text, host))
    return out


def _jobs(todo: Sequence[DictConfig], n_jobs: int, launcher: str, overrides: Sequence[str]):
    """(name, run dir | None, output, host) of each config as it ends, wherever it ran. Locally
    (joblib), configs that simulate the same probes run as one job (`_run_group`)."""
    import os

    from harness.config.experiment import job_config
    from harness.launch.hydra_jobs import launch_configs

    args = [(OmegaConf.to_yaml(c), os.getcwd()) for c in todo]
    params = launcher_params(launcher, overrides)
    if params and not params["_target_"].endswith("JoblibLauncher"):
        typed = [job_config(c) for c in todo]
        for i, value, err in launch_configs(params, _run_one, args, typed, Path(str(todo[0].results_dir))):
            yield value if err is None else (str(todo[i].name), None, f"the job crashed: {type(err).__name__}: {err}", "")
        return
    from joblib import Parallel, delayed

    n_jobs = int(params.get("n_jobs", n_jobs)) if overrides else n_jobs
    for done in Parallel(n_jobs=n_jobs, backend="loky", return_as="generator_unordered")(
            delayed(_run_group)([args[i] for i in group]) for group in _groups(todo)):
        yield from done
