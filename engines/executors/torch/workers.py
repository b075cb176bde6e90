"""Worker processes for tensor and pipeline parallelism: one process per (pp_rank, tp_rank),
rank = pp_rank * tp + tp_rank, each holding one shard of one stage.

The driver (TorchExecutor) sends every worker the same commands over a queue; workers of a stage
run it in lock-step (their TP collectives pair up), pass activations to the next stage with a
point-to-point send, and the last stage's TP rank 0 returns the sampled tokens. Each stage works
through its queue in order, so while stage 1 computes micro-batch k, stage 0 is already on k + 1:
that is the pipelining, and the driver may submit up to `pp` micro-batches before waiting.
"""
from __future__ import annotations

import os
import traceback
from dataclasses import dataclass

import torch
import torch.distributed as dist

from engines.models.config import ModelConfig
from engines.models.parallel import ParallelState, set_parallel


@dataclass(frozen=True)
class WorkerSpec:
    config: ModelConfig
    dtype: str
    device_type: str  # "cpu" or "cuda"
    block_size: int
    weights_dir: str | None
    seed: int
    attention_backend: str
    memory_utilization: float
    tp: int
    pp: int
    init_method: str
    dist_backend: str  # gloo or nccl


def worker_main(rank: int, spec: WorkerSpec, commands, results) -> None:
    world = spec.tp * spec.pp
    try:
        if spec.device_type == "cpu":
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
            device = torch.device("cpu")
        else:
            device = torch.device("cuda", rank % torch.cuda.device_count())
            torch.cuda.set_device(device)
        dist.init_process_group(spec.dist_backend, init_method=spec.init_method, world_size=world, rank=rank)
        pp_rank, tp_rank = divmod(rank, spec.tp)
        # Every rank must take part in creating every group, its own or not.
        groups = [dist.new_group(list(range(s * spec.tp, (s + 1) * spec.tp))) for s in range(spec.pp)]
        set_parallel(ParallelState(tp_rank=tp_rank, tp_size=spec.tp, pp_rank=pp_rank, pp_size=spec.pp,
                                   tp_group=groups[pp_rank]))
        from engines.executors.torch.model_runner import ModelRunner  # after the parallel state is set

        runner = ModelRunner(spec.config, dtype=getattr(torch, spec.dtype), device=device,
                             block_size=spec.block_size, weights_dir=spec.weights_dir, seed=spec.seed,
                             attention_backend=spec.attention_backend)
        results.put(("ready", rank, runner.kv_capacity_tokens(spec.memory_utilization), runner.backend.name))
        _serve(rank, spec, runner, commands, results)
    except Exception:
        results.put(("error", rank, traceback.format_exc()))
    # Exit without the interpreter's slow teardown (and without a process-group barrier the
    # other ranks may never reach after an error); flush what the driver must still read first.
    results.close()
    results.join_thread()
    os._exit(0)


def _serve(rank: int, spec: WorkerSpec, runner, commands, results) -> None:
    par = runner.parallel
    prev_rank, next_rank = rank - spec.tp, rank + spec.tp
    hidden = runner.config.hidden_size
    while True:
        cmd = commands.get()
        kind = cmd[0]
        if kind == "stop":
            return
        if kind == "alloc":
            runner.allocate_kv(cmd[1])
        elif kind == "free":
            runner.free(cmd[1])
        elif kind == "step":
            plan = cmd[1]
            inputs = runner.prepare(plan)
            hidden_in = None
            if not par.is_first_stage:
                hidden_in = torch.empty(plan.num_tokens, hidden, dtype=runner.dtype, device=runner.device)
                dist.recv(hidden_in, src=prev_rank)
            out = runner.forward(inputs, hidden_in)
            if not par.is_last_stage:
                dist.send(out.contiguous(), dst=next_rank)
                continue
            tokens = runner.sample(inputs, out)
            if runner.samples:
                results.put(("step", plan.step_id, tokens))
        else:
            raise ValueError(f"unknown worker command {kind!r}")
