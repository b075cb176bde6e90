"""What one job asks a cluster for, derived from its experiment config (never written by hand;
docs/clusters.md): CPUs for a simulated job (`search.workers` with a local pool), and for a live
job whose servers run the model, the deployment's tp x pp x dp GPUs placed node by node as it
places them, with a time limit from the most probes its searches can take."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace

from common.errors import HarnessError
from engines.perf.hardware import get_gpu, get_topology
from harness.settings.experiment import ExperimentConfig
from harness.settings.search import SearchSettings

SIM_PROBE_S = 60.0  # a simulated probe of 2048 requests takes seconds to a minute on one core
TIME_MARGIN = 1.5
MIN_TIMEOUT_MIN = 10


@dataclass(frozen=True)
class JobResources:
    """One job's request: `nodes` nodes, each with `gpus_per_node` GPUs and `tasks_per_node`
    tasks; the job's own process (rank 0) takes `cpus_per_task` CPUs; `timeout_min` minutes."""

    nodes: int = 1
    gpus_per_node: int = 0
    tasks_per_node: int = 1
    cpus_per_task: int = 1
    timeout_min: int = MIN_TIMEOUT_MIN

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def describe(self) -> str:
        gpus = f"{self.nodes} node(s) x {self.gpus_per_node} GPU(s)" if self.gpus else "no GPU"
        return f"{gpus}, {self.cpus_per_task} CPU(s), {self.timeout_min} min"


FIXED_KEYS = tuple(f.name for f in fields(JobResources))  # what a launcher config may fix for every job


def probes_per_search(search: SearchSettings) -> int:
    """The most probes one capacity search takes: bracket from start_qps to max_qps (or down to
    min_qps), then bisect a 2x bracket to rel_tol."""
    if search.fixed_qps:
        return 1
    start, lo, hi, tol = search.start_qps, search.min_qps, search.max_qps, search.rel_tol
    bracket = max(math.ceil(math.log2(max(hi / start, 1.0))), math.ceil(math.log2(max(start / lo, 1.0))))
    return bracket + 1 + math.ceil(math.log2(1.0 / tol))


def probe_seconds(config: ExperimentConfig) -> float:
    search = config.search
    if search.time_limit_s:
        return float(search.time_limit_s)
    if config.backend.name == "sim":
        return SIM_PROBE_S
    return 1.25 * search.num_requests / (search.fixed_qps or search.start_qps)  # the arrivals, then the last requests' tails


def time_limit_min(config: ExperimentConfig) -> int:
    schedulers = len(config.schedulers()) or 1
    seconds = schedulers * config.search.repeats * probes_per_search(config.search) * probe_seconds(config)
    seconds += schedulers * config.backend.start_s
    return max(MIN_TIMEOUT_MIN, math.ceil(TIME_MARGIN * seconds / 60.0))


def job_resources(config: ExperimentConfig, live_gpus: bool = True) -> JobResources:
    search = config.search
    cpus = search.workers if search.workers > 1 and search.executor == "local" else 1
    timeout = time_limit_min(config)
    # GPUs where the job's own servers run the model on them (the backend says: a live job with vLLM or
    # the torch executor; `live_gpus=false` for CPU builds of them). The simulator, the perf-model
    # executor in real time and an endpoint somewhere else run on CPUs.
    if not (live_gpus and config.backend.runs_model_on_gpus):
        return JobResources(cpus_per_task=cpus, timeout_min=timeout)
    p, hw = config.parallel, config.hardware
    gpus = p.tp * p.pp * p.dp
    # the GPU's usual node (get_topology refuses hardware.gpus_per_node < 1)
    per_node = get_topology(hw.topology, get_gpu(hw.gpu), hw.gpus_per_node).gpus_per_node
    nodes = math.ceil(gpus / per_node)
    return JobResources(nodes=nodes, gpus_per_node=min(gpus, per_node), tasks_per_node=1, cpus_per_task=cpus,
                        timeout_min=timeout)


def check_room(jobs: Sequence[tuple[str, JobResources]], where: str, node: str, node_gpus: Sequence[int],
               node_cpus: int, one_node: str | None = None) -> None:
    """Every job fits `where` (`node`: one of its nodes, as a message names it; `node_gpus`: each
    node's GPUs; `node_cpus`: the most CPUs of one, 0 unknown), each of its nodes on another node,
    else HarnessError naming the first that does not: a request never met would wait forever.
    `one_node`: why `where` runs no job over several nodes (None: it may)."""
    most = max(node_gpus, default=0)
    for label, res in jobs:
        if res.nodes > 1 and one_node:
            raise HarnessError(f"{label} needs {res.nodes} nodes; {one_node}; nothing was submitted")
        if res.gpus_per_node > most:
            raise HarnessError(f"{label} asks for {res.gpus_per_node} GPU(s) per node, {node} has at most {most}; "
                               "nothing was submitted")
        fitting = sum(g >= res.gpus_per_node for g in node_gpus)
        if fitting < res.nodes:
            raise HarnessError(f"{label} needs {res.nodes} nodes with {res.gpus_per_node} GPU(s) each, {where} has "
                               f"{fitting}; nothing was submitted")
        if node_cpus and res.cpus_per_task * res.tasks_per_node > node_cpus:
            raise HarnessError(f"{label} asks for {res.cpus_per_task * res.tasks_per_node} CPUs a node (search.workers), "
                               f"{node} has {node_cpus}; nothing was submitted")


def with_fixed(res: JobResources, fixed: Mapping) -> JobResources:
    """`res` with the fields a launcher config sets explicitly (non-null) taking precedence."""
    return replace(res, **{k: int(fixed[k]) for k in FIXED_KEYS if fixed.get(k) is not None})


@dataclass(frozen=True)
class RayRequest:
    """`ray.remote` options for the job's own task, and the placement group it runs in (one
    bundle per node, STRICT_SPREAD: each on another node) when the deployment spans nodes."""

    options: dict
    bundles: tuple[dict, ...] = ()
    strategy: str = "STRICT_SPREAD"


def ray_request(res: JobResources) -> RayRequest:
    options = {"num_cpus": res.cpus_per_task, "num_gpus": res.gpus_per_node}
    if res.nodes == 1:
        return RayRequest(options)
    # Bundle 0 holds the job's own task (its CPUs and node 0's GPUs); the others hold the GPUs of
    # the other nodes for the servers the job starts there (child tasks are captured by the group).
    bundles = tuple({"CPU": res.cpus_per_task if i == 0 else 1, "GPU": res.gpus_per_node} for i in range(res.nodes))
    return RayRequest(options, bundles)


def slurm_params(res: JobResources) -> dict:
    """submitit's parameters for one job: JobResources' fields are the hydra-submitit-launcher's
    names (gpus_per_node left out where none is asked for)."""
    return {k: v for k, v in asdict(res).items() if v or k != "gpus_per_node"}
