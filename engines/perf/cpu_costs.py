"""An engine's CPU costs per iteration: scheduling, input preparation, sampling, output processing,
and the driver-to-worker hop with more than one GPU. Each engine stack (kernels.py) names its
profile; a Deployment's explicit value wins (deployment.py).

The one measured profile, `vidur-2024`, is the public CPU-overhead profile of the Vidur simulator
(microsoft/vidur, data/profiling/a100/cpu_overheads.csv), measured on the Sarathi-Serve-era
engine on the paper's A100s. Medians for Llama-2-7B, TP1:

    batch   schedule  sampler_e2e  prepare_inputs_e2e  process_model_outputs   sum (ms)
      8      0.165      0.888          0.293               0.624               1.97
     32      0.580      1.126          0.671               2.246               4.62
     64      0.952      1.370          1.163               4.108               7.59

A straight line through them is 1.2 ms + 0.10 ms per sequence. The same file reports
RAY_COMM_TIME_MEDIAN, the driver-to-worker round trip that only multi-GPU deployments pay
(0.16-0.45 ms at TP1, i.e. nothing to speak of). It grows with the batch (the inputs and
outputs it carries); medians for Llama-2-70B, TP4, the shape of the paper's PP stages:

    batch       8     16     24     32     40     48     56     64
    ray (ms)  3.05   3.76   4.39   5.40   6.44   7.86   8.50   8.49

A least-squares line through them is 2.05 ms + 0.109 ms per sequence (Llama-2-7B TP4:
2.3 + 0.098; TP2: 2.0 + 0.067) -> 2.0 ms + 0.10 ms per sequence. (The vLLM v0.6.0
performance blog, Sep 2024, makes the same point qualitatively: on Llama-3-8B/H100, scheduling
alone was 29 % of the step time in v0.5.3.)

`vllm-v1` is vLLM V1's engine core, synchronous (no `--async-scheduling`), from per-step component
times its developers measured (no V1 per-iteration total is published; the V1 blog, Jan 2025,
aims at "near-zero CPU overhead" and gives no figure):

    Scheduler.schedule()                     0.20 ms a step     vllm PR #42131 (B200, before the PR's
    GPUModelRunner._update_states            0.18 ms             own savings: schedule 0.2 -> 0.04 ms,
    _prepare_inputs (decode-only batch)      0.05 ms             update_states -0.18, prepare -0.05)
    Scheduler.update_from_output()           1.1 us a request   vllm PR #46112 (batch 128: 0.142 ms,
                                                                 batch 256: 0.287 ms)
    SchedulerOutput to the TP workers        9.5 us a request   vllm benchmarks/overheads/
      (shared-memory message queue:                              benchmark_scheduler_output_rpc_pack.py,
       writer pickle + worker load)                              845 + 1054 us for a ~200-request step

-> 0.43 ms + 1.1 us a sequence, and with more than one GPU 9.5 us a sequence more (that benchmark's
step carries 2K-token prompts; a decode step sends only per-request diffs, so this is high; its fixed
part is not measured: 0). Sampling and detokenization are not in them (V1 detokenizes in the API
server's process, beside the engine core). A check, not a fit: vllm issue #48229 reports ~6 ms
steps for Qwen2.5-7B at batch 32 on one H100 with CUDA graphs.

What vLLM's async engine does not hide (vLLM 0.32.0, read whole; issue 50). With async scheduling
(`v1/engine/core.py` `step_with_batch_queue`) step N+1 is scheduled and handed to the workers before
N's output is awaited, and N's `update_from_output` runs while N+1 computes: a step costs
max(GPU, CPU), priced by the `vllm-0.19`/`vllm-0.32` stacks. Two costs stay outside that overlap:

* **On a CPU platform there is no overlap.** `platforms/cpu.py` sets `scheduler_config.
  async_scheduling = False` ("async scheduling is not required on CPU"), so `EngineCore.step` runs
  `Scheduler.schedule()`, the model and `Scheduler.update_from_output()` in series: the scheduler's
  time adds to every step. Profiles `vllm-0.32-cpu` (vLLM's own `Scheduler`) and
  `vllm-0.32-cpu-plugin` (the harness's `PolicyScheduler` running Sarathi-Serve: the CPU loop's
  engine, `benchmarks/bench_validate.py --engine vllm`), timed in-process on the project's 2-core
  development host by `scripts/vllm_cpu_costs.py` (decode steps of 1-32 requests, no model; the
  table is its output, medians of three runs, load average 7-9); least-squares lines through them:

      requests (n)              1     2     4     8    16    32   priced
      Scheduler (us)           38   101   197   283   542   988   45 + 30 n  (n = 1: +94 %, else within 17 %)
      PolicyScheduler (us)    176   267   316   471   830  1468  156 + 41 n  (within 12 %)
      process_outputs (us)      7    13    23    53   297   572   the table, piecewise linear (no line fits:
                                                                 6.6 us a request to 8, 18 from 16 on)

* **The API server's output processing is after the step, every step, on any device.** The engine
  core sends each step's outputs to the API server process, whose one `AsyncLLM.output_handler`
  task (`v1/engine/async_llm.py`) runs `OutputProcessor.process_outputs` on them
  (`v1/engine/output_processor.py`: detokenize each request's new tokens, build its RequestOutput,
  put it in the request's queue) before any request's stream sees its token: a token reaches the
  client that long after its step ends, and a step's outputs wait for the previous step's (one task,
  in order). `FrontendCosts` (the row `process_outputs` above, measured with the tiny model's
  tokenizer, streaming completions). Priced where measured: the CPU profiles above, applied by
  `validate`/`calibrate` (harness/validate/frontend.py) to the replay's token times; no measurement
  of it on a GPU server's host was found, so the GPU stacks leave it out (an under-estimate of TTFT
  and ITL by it). Not priced anywhere, for want of a measurement: the HTTP/SSE layer, a request's
  intake (`InputProcessor.process_inputs`, the ZMQ hops), the engine core's output serialization.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from common.errors import HarnessError


@dataclass(frozen=True)
class CpuCosts:
    cpu_overhead_s: float  # per iteration, fixed part
    cpu_overhead_per_seq_s: float  # per sequence in the batch
    multi_gpu_overhead_s: float  # per iteration when tp * pp > 1 (the driver-to-worker hop)
    multi_gpu_overhead_per_seq_s: float  # per sequence when tp * pp > 1


CPU_FIELDS = tuple(CpuCosts.__dataclass_fields__)

# Vidur's A100 profile (module docstring): 1.2 ms + 0.10 ms/seq; RAY_COMM_TIME_MEDIAN 2.0 ms + 0.10 ms/seq.
CPU_PROFILES: dict[str, CpuCosts] = {
    "vidur-2024": CpuCosts(cpu_overhead_s=1.2e-3, cpu_overhead_per_seq_s=0.10e-3,
                           multi_gpu_overhead_s=2.0e-3, multi_gpu_overhead_per_seq_s=0.10e-3),
    # vLLM V1's measured step components (module docstring): 0.43 ms + 1.1 us/seq; TP hop 9.5 us/seq.
    "vllm-v1": CpuCosts(cpu_overhead_s=0.43e-3, cpu_overhead_per_seq_s=1.1e-6,
                        multi_gpu_overhead_s=0.0, multi_gpu_overhead_per_seq_s=9.5e-6),
}

# The profile above was measured on the A100 servers. The A40 server has its own host CPU and
# its own profile (Vidur data/profiling/a40/cpu_overheads.csv, Llama-2-70B TP4 medians, ms):
#
#    batch   schedule + sampler_e2e + prepare_inputs_e2e + process_model_outputs   ray_comm
#      8        0.27   +   1.68    +   0.47             +   1.00  =  3.43          3.92
#     32        0.89   +   2.05    +   1.05             +   3.16  =  7.14          6.56
#     64        1.24   +   2.09    +   1.82             +   5.74  = 10.89          9.31
#
# Least-squares lines: 2.6 ms + 0.13 ms per sequence, and 3.3 ms + 0.096 ms per sequence.
# Keyed by (CPU profile, topology name): a server's host goes with its GPUs.
HOST_OVERHEADS: dict[tuple[str, str], CpuCosts] = {
    ("vidur-2024", "paper-a40"): CpuCosts(cpu_overhead_s=2.6e-3, cpu_overhead_per_seq_s=0.13e-3,
                                          multi_gpu_overhead_s=3.3e-3, multi_gpu_overhead_per_seq_s=0.096e-3),
}




@dataclass(frozen=True)
class FrontendCosts:
    """The API server's work on one step's outputs (module docstring), measured at `requests` with a
    token in the step: piecewise linear between them, the last segment's slope past the last, 0 for
    none. It starts when the step ends and the previous step's is done."""

    requests: tuple[int, ...]
    seconds: tuple[float, ...]

    def time(self, requests: int) -> float:
        if requests <= 0:
            return 0.0
        n, t = (0, *self.requests), (0.0, *self.seconds)
        if requests >= n[-1]:
            return t[-1] + (requests - n[-1]) * (t[-1] - t[-2]) / (n[-1] - n[-2])
        i = next(k for k in range(1, len(n)) if requests <= n[k])
        return t[i - 1] + (requests - n[i - 1]) * (t[i] - t[i - 1]) / (n[i] - n[i - 1])


# vLLM 0.32 on a CPU host (module docstring: serial steps, no async scheduling), measured on the project's
# 2-core development host by scripts/vllm_cpu_costs.py; least-squares lines through its medians.
CPU_PROFILES["vllm-0.32-cpu"] = CpuCosts(cpu_overhead_s=45e-6, cpu_overhead_per_seq_s=30e-6,
                                         multi_gpu_overhead_s=0.0, multi_gpu_overhead_per_seq_s=0.0)
CPU_PROFILES["vllm-0.32-cpu-plugin"] = CpuCosts(cpu_overhead_s=156e-6, cpu_overhead_per_seq_s=41e-6,
                                                multi_gpu_overhead_s=0.0, multi_gpu_overhead_per_seq_s=0.0)
_VLLM_032_CPU_FRONTEND = FrontendCosts(requests=(1, 2, 4, 8, 16, 32),
                                       seconds=(7e-6, 13e-6, 23e-6, 53e-6, 297e-6, 572e-6))
FRONTEND_PROFILES: dict[str, FrontendCosts] = {"vllm-0.32-cpu": _VLLM_032_CPU_FRONTEND,
                                               "vllm-0.32-cpu-plugin": _VLLM_032_CPU_FRONTEND}

# What a run prices on the CPU (`perf.cpu_costs`): "engine" the stack's profile above (an engine's
# iteration as run), "none" GPU kernels only, as an operator-profile simulator prices them (the first
# Sarathi paper's Sec. 5.4 simulator; its successor Vidur skips CPU overheads unless asked,
# vidur/config/config.py skip_cpu_overhead_modeling = True), or a measured host profile by name
# (the vLLM CPU ones above: the engine core's costs, and its API server's where `FRONTEND_PROFILES` has it).
CPU_CHOICES = ("engine", "none", "vllm-0.32-cpu", "vllm-0.32-cpu-plugin")


def cpu_choice(choice: str) -> dict[str, float]:
    """Deployment field values for a `perf.cpu_costs` choice ({}: the stack's own)."""
    if choice not in CPU_CHOICES:
        raise HarnessError(f"perf.cpu_costs must be one of {', '.join(CPU_CHOICES)}, got {choice!r}")
    if choice in CPU_PROFILES:
        return asdict(CPU_PROFILES[choice])
    return {} if choice == "engine" else dict.fromkeys(CPU_FIELDS, 0.0)


def frontend_costs(choice: str) -> FrontendCosts | None:
    """The API server's measured costs for a `perf.cpu_costs` choice (None: not measured, not priced)."""
    return FRONTEND_PROFILES.get(choice)


def cpu_costs(profile: str, host: str | None = None) -> dict[str, float]:
    """The profile's costs on `host` (a topology name), as Deployment field values."""
    if profile not in CPU_PROFILES:
        raise HarnessError(f"unknown CPU-cost profile {profile!r}; known: {', '.join(sorted(CPU_PROFILES))}")
    return asdict(HOST_OVERHEADS.get((profile, host or ""), CPU_PROFILES[profile]))
