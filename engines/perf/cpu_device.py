"""This machine's CPU as a device of the performance model (`hardware=cpu`): a CPU engine (vLLM's
CPU build, the in-repo torch executor on CPU) priced by the same model as a GPU.

Its numbers are never a catalog constant for one machine: they are given in the config
(`hardware.cpu_flops`, `hardware.cpu_bandwidth`, B/s) or measured here by a short probe (a few
hundred ms) the first time a process asks: a float32 matrix product on one core times the cores
for FLOP/s, an array copy larger than the caches for memory bandwidth, `os.sched_getaffinity` for cores. Probed numbers are
achievable ones, so the efficiencies are 1: what a serving engine reaches below them is what
`python -m harness calibrate` fits (flops_scale, bandwidth_scale).
"""
from __future__ import annotations

import functools
import json
import os
import subprocess
import sys

from common.errors import HarnessError

from .hardware import GpuSpec

CPU_NAMES = ("cpu",)
# KV and weights live in host memory: the share of it the model may size a KV cache from when
# the config does not say (vLLM CPU sizes its cache by VLLM_CPU_KVCACHE_SPACE, not by a fraction).
_DEFAULT_MEMORY_BYTES = 4 * 1024**3


def is_cpu(name: object) -> bool:
    return isinstance(name, str) and name.strip().lower() in CPU_NAMES


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


_PROBE = """
import json, time
import numpy as np

def best_of(fn, repeats):
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best

n = 256
a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
b = a.T.copy()
a @ b
flops = 2 * n**3 / best_of(lambda: a @ b, 40)
src = np.ones(32 * 1024**2 // 8)  # 32 MiB: past the last-level cache of the machines this runs on
dst = np.empty_like(src)
np.copyto(dst, src)
print(json.dumps([flops, 2 * src.nbytes / best_of(lambda: np.copyto(dst, src), 10)]))  # copy: read + write
"""
_ONE_THREAD = {k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}


@functools.lru_cache(maxsize=1)
def probe() -> tuple[float, float]:
    """(FLOP/s, memory B/s) measured on this machine now: one core's matrix-product rate times the
    cores, and one core's copy bandwidth, each the best of several repeats. One thread, in a process
    of its own: a multi-threaded BLAS on a busy host measured anything from 7 to 220 GFLOP/s here
    (its threads spin-waiting for each other), one core's rate moves far less."""
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=60,
                         env={**os.environ, **_ONE_THREAD})
    if out.returncode != 0:
        raise HarnessError(f"hardware=cpu: the probe failed ({out.stderr.strip().splitlines()[-1:]}); "
                           "give hardware.cpu_flops= and hardware.cpu_bandwidth=")
    flops, bandwidth = json.loads(out.stdout)
    return float(flops) * cores(), float(bandwidth)


def cpu_spec(flops: float | None = None, bandwidth: float | None = None, memory_bytes: int | None = None) -> GpuSpec:
    """The CPU device: given numbers where the config has them, probed ones otherwise."""
    if flops is None or bandwidth is None:
        measured = probe()
        flops = measured[0] if flops is None else flops
        bandwidth = measured[1] if bandwidth is None else bandwidth
    for what, v in (("cpu_flops", flops), ("cpu_bandwidth", bandwidth)):
        if not (float(v) > 0):
            raise HarnessError(f"hardware.{what} must be > 0, got {v}")
    return GpuSpec(name="cpu", peak_flops=float(flops), hbm_bytes=int(memory_bytes or _DEFAULT_MEMORY_BYTES),
                   hbm_bandwidth=float(bandwidth), matmul_efficiency=1.0, attention_efficiency=1.0, hbm_efficiency=1.0,
                   sm_count=cores(), weight_stream_efficiency=1.0)


def describe(spec: GpuSpec) -> str:
    return (f"cpu ({spec.sm_count} cores, {spec.peak_flops / 1e9:.3g} GFLOP/s, "
            f"{spec.hbm_bandwidth / 1e9:.3g} GB/s)")
