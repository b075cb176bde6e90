"""What the scheduler plugin costs vLLM per step: schedule() plus update_from_output() of vLLM's
own AsyncScheduler against PolicyScheduler (sarathi, with and without its iteration trace), driven
in-process with a fake model output (engines/external/vllm_scheduler/offline.py), N requests all
decoding. Run in vLLM's venv, from the repository root:

  PYTHONPATH=. $HARNESS_VLLM_PYTHON benchmarks/bench_vllm_plugin.py [--decodes 32,256] [--steps 400]

Prints the median microseconds per step after a warm-up of a quarter of the steps.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path


def per_step_us(cls, model: str, decodes: int, steps: int) -> float:
    from vllm import SamplingParams
    from vllm.v1.request import Request

    from engines.external.vllm_scheduler.offline import build_scheduler, step_output

    scheduler = build_scheduler(cls, model, kv_blocks=20000, block_size=16, max_model_len=2048, max_num_seqs=256,
                                max_num_batched_tokens=2048)
    for i in range(decodes):
        scheduler.add_request(Request(str(i), [5] * 100, SamplingParams(max_tokens=1900, ignore_eos=True), None,
                                      arrival_time=0.0))
    previous, times = None, []
    for _ in range(steps):
        t = time.perf_counter()
        output = scheduler.schedule()
        this = step_output(scheduler, output)
        if previous is not None:
            scheduler.update_from_output(*previous)
        times.append(time.perf_counter() - t)
        previous = (output, this) if this is not None else None
    scheduler.shutdown()
    return 1e6 * statistics.median(times[steps // 4:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--decodes", default="32,256")
    ap.add_argument("--steps", type=int, default=400)  # at most 1,900: the requests decode that many tokens
    args = ap.parse_args()
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler

    from engines.external.vllm_scheduler import POLICY_ENV, TRACE_ENV
    from engines.external.vllm_scheduler.offline import write_model_config
    from engines.external.vllm_scheduler.scheduler import PolicyScheduler

    work = Path(tempfile.mkdtemp(prefix="bench-vllm-plugin-"))
    model = write_model_config(work / "model")
    os.environ[POLICY_ENV] = json.dumps({"policy": "sarathi", "knobs": {"token_budget": 2048, "max_num_seqs": 256}})
    for n in (int(x) for x in args.decodes.split(",")):
        os.environ.pop(TRACE_ENV, None)
        stock = per_step_us(AsyncScheduler, model, n, args.steps)
        plugin = per_step_us(PolicyScheduler, model, n, args.steps)
        os.environ[TRACE_ENV] = str(work / f"trace-{n}.jsonl")
        traced = per_step_us(PolicyScheduler, model, n, args.steps)
        print(f"{n:4} decodes: vLLM's AsyncScheduler {stock:7.0f} us, plugin (sarathi) {plugin:7.0f} us, "
              f"with trace {traced:7.0f} us a step", flush=True)


if __name__ == "__main__":
    main()
