"""submitit for the harness: one executor (local processes or SLURM), jobs submitted in groups of
one resource shape each (one job array per shape), collected as each finishes."""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence

from harness.launch.resources import JobResources, slurm_params

# hydra-submitit-launcher's keys that submitit takes as they are (BaseQueueConf); the others are
# the executor's own, prefixed (partition -> slurm_partition).
GENERIC = {"timeout_min", "cpus_per_task", "gpus_per_node", "tasks_per_node", "mem_gb", "nodes", "name",
           "stderr_to_stdout"}
NOT_PARAMS = {"submitit_folder", "max_num_timeout", "_target_"}
POLL_S = 0.5


def executor(kind: str, params: Mapping):
    """An AutoExecutor for `kind` (local | slurm) from the launcher's params (the plugin's keys)."""
    import submitit

    init = {"folder": params["submitit_folder"]}
    if params.get("max_num_timeout") is not None:
        init[f"{kind}_max_num_timeout"] = params["max_num_timeout"]
    ex = submitit.AutoExecutor(cluster=kind, **init)
    base = {k if k in GENERIC else f"{kind}_{k}": v for k, v in params.items()
            if k not in NOT_PARAMS and v is not None}
    if kind == "local":  # submitit's local executor takes these few, and nothing SLURM's
        base = {k: v for k, v in base.items() if k in GENERIC}
    ex.update_parameters(**base)
    return ex


def submit(kind: str, params: Mapping, fn: Callable, args: Sequence[tuple], resources: Sequence[JobResources]) -> list:
    """Every job, in groups of one resource shape (one job array and executor each, so no shape's
    parameters leak into another's); the jobs in input order."""
    groups: dict[tuple, list[int]] = {}
    for i, res in enumerate(resources):
        groups.setdefault(tuple(sorted(slurm_params(res).items())), []).append(i)
    jobs: list = [None] * len(args)
    for shape, members in groups.items():
        ex = executor(kind, {**params, **dict(shape)})
        for i, job in zip(members, ex.map_array(fn, *zip(*[args[i] for i in members]))):
            jobs[i] = job
    return jobs


def as_completed(jobs: Sequence) -> Iterator[tuple[int, object, BaseException | None]]:
    """(index, the first task's result, None) or (index, None, the error), as each job ends."""
    pending = dict(enumerate(jobs))
    while pending:
        finished = [i for i, j in pending.items() if j.done()]
        if not finished:
            time.sleep(POLL_S)
            continue
        for i in finished:
            job = pending.pop(i)
            try:
                yield i, job.results()[0], None
            except Exception as e:  # FailedJobError (the job raised or was killed), UncompletedJobError
                yield i, None, e
