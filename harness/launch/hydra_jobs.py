"""The launchers' work behind the Hydra plugins (hydra_plugins/harness_launchers; docs/clusters.md):
each job's resource request, all checked before any is submitted (one line, exit status 2), each
submitted through the official plugins' job bodies, every result collected as it ends (a job that
raised or whose worker died is a failed JobReturn), then one line a job and the worst status."""
from __future__ import annotations

import shlex
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides, setup_globals
from omegaconf import DictConfig, OmegaConf, open_dict

from common.errors import HarnessError
from harness.launch import ray_session, slurm, submitit_jobs
from harness.launch.outcome import EXIT_CRASHED, JobOutcome, exit_code, first_line
from harness.launch.resources import FIXED_KEYS, JobResources, job_resources, with_fixed
from harness.overrides import refuse
from harness.settings.experiment import ExperimentConfig

OUR_KEYS = ("live_gpus", "check_resources")


def _plain(v):
    return OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v


def _jobs(launcher, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list[tuple[int, list[str], DictConfig]]:
    out = []
    for k, overrides in enumerate(job_overrides):
        idx = initial_job_idx + k
        cfg = launcher.hydra_context.config_loader.load_sweep_config(launcher.config, list(overrides))
        with open_dict(cfg):
            cfg.hydra.job.id = f"job_id_for_{idx}"
            cfg.hydra.job.num = idx
        out.append((idx, list(overrides), cfg))
    return out


def label(idx: int, overrides: Sequence[str]) -> str:
    return f"job #{idx} ({' '.join(filter_overrides(overrides)) or 'no overrides'})"


def requests(configs: Sequence[ExperimentConfig | None], params: Mapping) -> list[JobResources]:
    """Each job's resource request (a config the harness refuses, None, gets the smallest: the job
    then fails on its own, with its own line, and the others run)."""
    out = []
    for config in configs:
        try:
            res = JobResources() if config is None else job_resources(config, bool(params.get("live_gpus", True)))
        except Exception:
            res = JobResources()
        out.append(with_fixed(res, params))
    return out


def check(kind: str, params: Mapping, labelled: Sequence[tuple[str, JobResources]]) -> None:
    """Every job fits where it goes (HarnessError naming the first that does not)."""
    if not params.get("check_resources", True):
        return
    if kind == "slurm":
        slurm.check_partition(params.get("partition"), labelled)
    elif kind == "local":
        slurm.check_local(labelled)
    else:
        ray_session.check_fits(labelled)


def _ready(launcher, kind: str, params: Mapping, jobs, resources: Sequence[JobResources], where: str) -> None:
    """Every job checked (one line and exit 2 if one does not fit), the sweep directory made, the
    jobs and their requests listed."""
    try:
        check(kind, params, [(label(i, o), r) for (i, o, _), r in zip(jobs, resources)])
    except HarnessError as e:
        raise SystemExit(refuse(e))  # inside Hydra's launcher: no status to return
    Path(str(launcher.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
    print(f"{where}: {len(jobs)} jobs", flush=True)
    for (idx, overrides, _), res in zip(jobs, resources):
        print(f"  {label(idx, overrides)}: {res.describe()}", flush=True)


def _returns(jobs, ended: Iterator[tuple[int, object, BaseException | None]]) -> list[JobReturn]:
    """Each job's JobReturn in input order; one that raised or whose worker died a failed one."""
    returns: list = [None] * len(jobs)
    for i, value, err in ended:
        if err is not None:
            value = JobReturn(overrides=jobs[i][1], cfg=jobs[i][2], status=JobStatus.FAILED)
            value.return_value = err
        returns[i] = value
    return returns


def launch_on_ray(launcher, job_overrides: Sequence[Sequence[str]], initial_job_idx: int,
                  typed: Callable[[DictConfig], ExperimentConfig | None]) -> list[JobReturn]:
    """`typed`: a job's composed config as the typed one (harness.config.job_config), None if refused."""
    from hydra_plugins.hydra_ray_launcher._launcher_util import _run_job  # the official plugin's job body

    setup_globals()
    params = {k: _plain(v) for k, v in launcher.params.items()}
    ray_cfg = params.get("ray") or {}
    jobs = _jobs(launcher, job_overrides, initial_job_idx)
    resources = requests([typed(cfg) for _, _, cfg in jobs], {"live_gpus": params.get("live_gpus", True), **ray_fixed(ray_cfg)})
    args = [(launcher.hydra_context, cfg, launcher.task_function, Singleton.get_state()) for _, _, cfg in jobs]
    try:
        return _returns(jobs, _on_ray(_run_job, args, resources, ray_cfg,
                                      lambda: _ready(launcher, "ray", params, jobs, resources, "ray")))
    except HarnessError as e:  # Ray could not be reached
        raise SystemExit(refuse(e))  # inside Hydra's launcher: no status to return


def _on_ray(fn: Callable, args: Sequence[tuple], resources: Sequence[JobResources], ray_cfg: Mapping,
            ready: Callable[[], None]) -> Iterator[tuple[int, object, BaseException | None]]:
    """`fn(*args[i])` on Ray, each with its resource request, once connected and `ready()` (the
    check) passed; (index, result, error) as each ends; the placement groups removed at the end."""
    connected, groups = ray_session.connect(ray_cfg.get("init")), []
    try:
        ready()
        refs = []
        for a, res in zip(args, resources):
            ref, group = ray_session.submit(fn, a, res, ray_cfg.get("remote"))
            refs.append(ref)
            groups.append(group)
        yield from ray_session.as_completed(refs)
    finally:
        if groups:
            ray_session.remove_groups(groups)
        ray_session.disconnect(connected)


def launch_on_submitit(launcher, job_overrides: Sequence[Sequence[str]], initial_job_idx: int,
                       typed: Callable[[DictConfig], ExperimentConfig | None]) -> list[JobReturn]:
    from hydra_plugins.hydra_submitit_launcher.submitit_launcher import LocalLauncher, SlurmLauncher

    kind = launcher.executor
    params, ours = split_params({k: _plain(v) for k, v in launcher.params.items()})
    jobs = _jobs(launcher, job_overrides, initial_job_idx)
    resources = requests([typed(cfg) for _, _, cfg in jobs], ours)
    _ready(launcher, kind, {**params, **ours}, jobs, resources, f"submitit ({kind})")
    # The official launcher is the submitted callable: in the job, it composes the job's config
    # and runs the task function (its __call__), as it would have.
    body = (SlurmLauncher if kind == "slurm" else LocalLauncher)()
    body.setup(hydra_context=launcher.hydra_context, task_function=launcher.task_function, config=launcher.config)
    args = [(overrides, "hydra.sweep.dir", idx, f"job_id_for_{idx}", Singleton.get_state()) for idx, overrides, _ in jobs]
    try:
        submitted = submitit_jobs.submit(kind, params, body, args, resources)
    except Exception as e:  # sbatch refused (an account, a QOS): one line
        raise SystemExit(refuse(HarnessError(f"submitit could not submit: {first_line(e)}")))
    return _returns(jobs, submitit_jobs.as_completed(submitted))


def split_params(params: Mapping) -> tuple[dict, dict]:
    """A launcher config's keys: (the official plugin's, ours: live_gpus, check_resources and the
    fixed resource fields)."""
    plugin = dict(params)
    ours = {k: plugin.pop(k) for k in (*OUR_KEYS, *FIXED_KEYS) if k in plugin}
    return plugin, ours


def ray_fixed(ray_cfg: Mapping) -> dict:
    """`ray.remote` options that fix a request for every job (num_gpus, num_cpus), as fields."""
    remote = ray_cfg.get("remote") or {}
    return {k: remote[o] for o, k in (("num_gpus", "gpus_per_node"), ("num_cpus", "cpus_per_task")) if o in remote}


def launch_configs(params: Mapping, fn: Callable, args: Sequence[tuple], configs: Sequence[ExperimentConfig | None],
                   results_dir: Path) -> Iterator[tuple[int, object, BaseException | None]]:
    """`fn(*args[i])` for each experiment config `configs[i]` (None: one the harness refuses)
    through the launcher `params` (a composed hydra/launcher node), each with its resource request,
    all checked before any is submitted; (index, result, error) as each ends. For `figure=all` and
    `nightly`."""
    target = str(params.get("_target_", ""))
    kind = next((kind for suffix, kind in (("RayLauncher", "ray"), ("SlurmLauncher", "slurm"),
                                           ("LocalLauncher", "local")) if target.endswith(suffix)), "joblib")
    plugin, ours = split_params(params)
    resources = requests(configs, {**ours, **ray_fixed(plugin.get("ray") or {})})
    labelled = [(c.name if c is not None else f"config {i}", r) for i, (c, r) in enumerate(zip(configs, resources))]
    if kind == "ray":
        yield from _on_ray(fn, args, resources, plugin.get("ray") or {}, lambda: check("ray", ours, labelled))
        return
    check(kind, {**plugin, **ours}, labelled)
    folder = results_dir / ".jobs" / time.strftime("%Y%m%d-%H%M%S") / "%j"
    plugin = {**plugin, "submitit_folder": str(folder), "name": "harness"}
    yield from submitit_jobs.as_completed(submitit_jobs.submit(kind, plugin, fn, args, resources))


def outcome_of(ret: JobReturn) -> JobOutcome:
    value = ret._return_value
    if ret.status == JobStatus.COMPLETED:
        return value if isinstance(value, JobOutcome) else JobOutcome(0)
    e = value if isinstance(value, BaseException) else RuntimeError(str(value))  # its worker died, the launcher lost it
    text = str(e).strip().splitlines()
    return JobOutcome(EXIT_CRASHED, error=f"{type(e).__name__}: {text[0] if text else ''}".rstrip(": "))


def sweep_and_report(sweeper, arguments: list[str]) -> list:
    """Hydra's basic sweep (batches of jobs through the launcher), without stopping at the first
    failed job; then one line per job and the worst exit status."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params_conf = [*sweeper._parse_config(), *arguments]
    parser = OverridesParser.create(config_loader=sweeper.hydra_context.config_loader)
    sweeper.overrides = sweeper.split_arguments(parser.parse_overrides(params_conf), sweeper.max_batch_size)
    sweep_dir = Path(sweeper.config.hydra.sweep.dir)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(sweeper.config, sweep_dir / "multirun.yaml")
    returns, idx = [], 0
    while not sweeper.is_done():
        batch = sweeper.get_job_batch()
        sweeper.validate_batch_is_legal(batch)
        returns.extend(sweeper.launcher.launch(batch, initial_job_idx=idx))
        idx += len(batch)
    hydra_overrides = [h for h in sweeper.config.hydra.overrides.get("hydra", []) if not h.startswith("hydra.mode=")]
    code = report(returns, hydra_overrides)
    if code:
        raise SystemExit(code)
    return [returns]


def report(returns: Sequence[JobReturn], hydra_overrides: Sequence[str] = ()) -> int:
    outcomes = [outcome_of(r) for r in returns]
    failed = [(r, o) for r, o in zip(returns, outcomes) if not o.done]
    print(f"\nmultirun: {len(returns)} jobs, {len(returns) - len(failed)} done, {len(failed)} failed", flush=True)
    for r, o in zip(returns, outcomes):
        where = f" on {o.host}" if o.host else ""
        print(f"  {'done  ' if o.done else 'FAILED'} {' '.join(r.overrides or [])}{where}: "
              f"{o.run_dir if o.done else o.error}", flush=True)
    if failed:
        again = " ".join(shlex.quote(h) for h in hydra_overrides)
        print("to rerun only the failed jobs:", flush=True)
        for r, _ in failed:
            words = " ".join(shlex.quote(w) for w in r.overrides or [])
            print(f"  python -m harness {'-m ' + again + ' ' if again else ''}{words}", flush=True)
        names = "; ".join(" ".join(r.overrides or []) for r, _ in failed)
        print(f"error: {len(failed)} of {len(returns)} jobs failed: {names} (the others' results are saved)",
              file=sys.stderr, flush=True)
    return exit_code(outcomes)
