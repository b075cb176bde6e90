"""Analytical GPU performance model: hardware and model catalogs, deployments, iteration times.

Pure numpy; importable without torch or hydra.

    from engines.perf import Deployment, PerfModel
    perf = PerfModel(Deployment.create(model="yi-34b", gpu="a100-80g-sxm", tp=2))
    perf.iteration_time([512, 1, 1], [0, 1000, 2000])
"""
from .analytical import BREAKDOWN_PARTS, DEFAULT_GPU_MEMORY_UTILIZATION, LINEAR_PARTS, PerfModel
from .architectures import ModelArch, get_model, known_models
from .deployment import Deployment
from .hardware import GpuSpec, Topology, get_gpu, get_topology, known_gpus, known_topologies
from .links import LinkSpec, get_link, known_links

__all__ = [
    "BREAKDOWN_PARTS", "DEFAULT_GPU_MEMORY_UTILIZATION", "LINEAR_PARTS", "Deployment", "GpuSpec", "LinkSpec", "ModelArch", "PerfModel", "Topology",
    "get_gpu", "get_link", "get_model", "get_topology", "known_gpus", "known_links", "known_models", "known_topologies",
]
