"""vLLM 0.32's own CPU work per step, timed in-process on this host: what its engine does not hide.

    $HARNESS_VLLM_PYTHON scripts/vllm_cpu_costs.py MODEL_DIR > costs.json

Run with the vLLM venv's python (scripts/setup_vllm_cpu.sh); MODEL_DIR is a model folder with a
tokenizer (scripts/make_tiny_model.py writes the CPU loop's). No model runs: each part is vLLM's
own class driven with synthetic requests, as vLLM's tests drive them, and timed with
time.perf_counter (the median of REPEATS passes over STEPS steps, after a warm-up pass):

* engine core, a decode step of n running requests: `Scheduler.schedule()` and
  `Scheduler.update_from_output()` (v1/core/sched/scheduler.py), the two calls of `EngineCore.step`
  (v1/engine/core.py) around the model. On a CPU platform vLLM turns async scheduling off
  (platforms/cpu.py: `scheduler_config.async_scheduling = False`), so `step` runs them in series
  with the model: a step's time is theirs plus the model's.
* API server, the same step's outputs: `OutputProcessor.process_outputs` (v1/engine/
  output_processor.py: detokenize each request's new token, build its RequestOutput, put it in the
  request's queue), which `AsyncLLM.output_handler` (v1/engine/async_llm.py) runs on every
  EngineCoreOutputs it receives, in the API server process, beside the engine core; then the
  request's streaming generator takes it from the queue (`RequestOutputCollector.get_nowait`). A
  token reaches the client this much after its step ends. Streaming completions (output kind DELTA,
  detokenize on: the `/v1/completions` defaults with stream=true).

stdout, JSON: {"version", "host_cores", "load_average", "batch": [n...], "engine_core_step_s": [...],
"plugin_step_s": [...] (the same with the harness's Sarathi-Serve scheduler plugin), "frontend_step_s":
[...]} (medians a step, by n). Not timed here: the HTTP/SSE layer (FastAPI,
the OpenAI chunk's JSON), the request's intake (`InputProcessor.process_inputs`, the ZMQ hops), the
worker's input preparation and sampling.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository: engines.external...offline
BATCH = (1, 2, 4, 8, 16, 32)
STEPS, REPEATS = 40, 15
PROMPT = 64


def engine_core_step(n: int, plugin: bool) -> float:
    """Median seconds of schedule() + update_from_output() for a decode step of n requests: vLLM's
    own synchronous `Scheduler`, or (`plugin`) the harness's `PolicyScheduler` running Sarathi-Serve
    (the CPU loop's engine: benchmarks/bench_validate.py --engine vllm)."""
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request

    from engines.external.vllm_scheduler.offline import build_scheduler, step_output, write_model_config

    if plugin:
        from engines.external.vllm_scheduler import plugin_env
        from engines.schedulers import SchedulerConfig

        os.environ.update(plugin_env(SchedulerConfig("sarathi", max_num_seqs=max(BATCH), token_budget=256)))
        from engines.external.vllm_scheduler.scheduler import PolicyScheduler as cls
    else:
        from vllm.v1.core.sched.scheduler import Scheduler as cls
    with tempfile.TemporaryDirectory() as folder:
        s = build_scheduler(cls, write_model_config(Path(folder)), kv_blocks=4096, block_size=16,
                            max_model_len=4096, max_num_seqs=max(BATCH), max_num_batched_tokens=2048,
                            prefix_caching=False, long_prefill_token_threshold=0, async_scheduling=False)
    total = STEPS * (REPEATS + 1) + 2
    for i in range(n):
        s.add_request(Request(str(i), [3 + (i * 31 + k) % 2000 for k in range(PROMPT)],
                              SamplingParams(max_tokens=total, ignore_eos=True), None, arrival_time=float(i)))
    out = s.schedule()  # the prompts' prefill
    s.update_from_output(out, step_output(s, out))
    times = []
    for _ in range(REPEATS + 1):
        t0 = time.perf_counter()
        for _ in range(STEPS):
            out = s.schedule()
            s.update_from_output(out, step_output(s, out))
        times.append((time.perf_counter() - t0) / STEPS)
    return statistics.median(times[1:])


def frontend_step(n: int, model_dir: str) -> float:
    """Median seconds of process_outputs() for one new token of each of n streaming requests, and
    the requests' generators taking them."""
    from vllm.sampling_params import RequestOutputKind, SamplingParams
    from vllm.tokenizers import get_tokenizer
    from vllm.v1.engine import EngineCoreOutput, EngineCoreRequest
    from vllm.v1.engine.output_processor import OutputProcessor, RequestOutputCollector

    tok = get_tokenizer(model_dir)
    proc = OutputProcessor(tok, log_stats=False)
    vocab = tok.vocab_size
    queues = []
    for i in range(n):
        params = SamplingParams(max_tokens=10 ** 6, ignore_eos=True, output_kind=RequestOutputKind.DELTA)
        params.update_from_tokenizer(tok) if hasattr(params, "update_from_tokenizer") else None
        req = EngineCoreRequest(request_id=str(i), prompt_token_ids=[3 + (i * 31 + k) % 200 for k in range(PROMPT)],
                                mm_features=None, sampling_params=params, pooling_params=None,
                                arrival_time=time.time(), lora_request=None, cache_salt=None, data_parallel_rank=None,
                                external_req_id=str(i))
        q = RequestOutputCollector(RequestOutputKind.DELTA, str(i))
        proc.add_request(req, None, None, 0, q)
        queues.append(q)
    step = 0
    times = []
    for _ in range(REPEATS + 1):
        t0 = time.perf_counter()
        for _ in range(STEPS):
            outs = [EngineCoreOutput(request_id=str(i), new_token_ids=[100 + (step * 7 + i * 13) % (vocab - 200)])
                    for i in range(n)]
            proc.process_outputs(outs, time.monotonic())
            for q in queues:
                q.get_nowait()
            step += 1
        times.append((time.perf_counter() - t0) / STEPS)
    return statistics.median(times[1:])


def main() -> int:
    if len(sys.argv) != 2 or not Path(sys.argv[1], "tokenizer_config.json").is_file():
        print("usage: vllm_cpu_costs.py MODEL_DIR (a model folder with a tokenizer: scripts/make_tiny_model.py)",
              file=sys.stderr)
        return 2
    import vllm

    core = [engine_core_step(n, plugin=False) for n in BATCH]
    plugin = [engine_core_step(n, plugin=True) for n in BATCH]
    front = [frontend_step(n, sys.argv[1]) for n in BATCH]
    json.dump({"version": vllm.__version__, "host_cores": os.cpu_count(), "load_average": os.getloadavg()[0],
               "batch": list(BATCH), "engine_core_step_s": core, "plugin_step_s": plugin, "frontend_step_s": front},
              sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
