"""Drives engines.external.vllm_scheduler's PolicyScheduler in-process, in vLLM's own venv, with
no model: synthetic requests and a fake model output (token 7 for every request that completes a
prompt or decodes), stepped as vLLM's engine core steps an async scheduler (step N+1 scheduled
before step N's output is processed). Run by tests/test_vllm_scheduler_plugin.py as
`HARNESS_VLLM_PYTHON tests/vllm_scheduler_driver.py SPEC.json`; SPEC names the policies, the
workload (per request: the step it arrives at, prompt tokens, max_tokens, and optionally the
output token at which the model emits a stop token (0: never) and the step at which the client
aborts it (-1: never)), the vLLM settings and the output folder; a policy's entry may replace the
workload and vLLM's settings. Per policy it writes `<name>.trace.jsonl` (the plugin's iteration trace) and
`<name>.json` (each request's output token count, or the one-line error that stopped the run, and
what the mirror and vLLM hold once everything finished: nothing, every block free).
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from engines.external.vllm_scheduler.offline import write_model_config

STOP = 9  # the fake model's stop token


def run(spec: dict, name: str, knobs: dict, model: str, out: Path) -> dict:
    from vllm import SamplingParams
    from vllm.v1.request import Request, RequestStatus

    from engines.external.vllm_scheduler.offline import build_scheduler, step_output
    from engines.external.vllm_scheduler.scheduler import PolicyScheduler

    trace = out / f"{name}.trace.jsonl"
    settings = {**spec["vllm"], **knobs.pop("vllm", {})}  # an entry may change vLLM's settings
    workload = [(list(w) + [0, -1])[:5] for w in knobs.pop("workload", spec["workload"])]
    module = knobs.pop("module", None)
    os.environ["HARNESS_VLLM_POLICY"] = json.dumps({"policy": knobs.pop("policy", name), "knobs": knobs, "module": module})
    os.environ["HARNESS_VLLM_TRACE"] = str(trace)
    try:
        scheduler = build_scheduler(PolicyScheduler, model, **settings)
    except (ValueError, ImportError) as e:
        return {"refused": str(e)}
    arrivals = sorted(enumerate(workload), key=lambda item: item[1][0])
    stop_after = {str(i): w[3] for i, w in enumerate(workload) if w[3]}
    aborts = {w[4]: str(i) for i, w in enumerate(workload) if w[4] >= 0}
    produced: dict[str, int] = {}
    previous = None
    step = 0
    while (arrivals or scheduler.has_requests() or previous is not None) and step < spec["max_steps"]:
        while arrivals and arrivals[0][1][0] <= step:
            i, (_, prompt, max_tokens, _, _) = arrivals.pop(0)
            scheduler.add_request(Request(str(i), [1 + (i + t) % 2000 for t in range(prompt)],
                                          SamplingParams(max_tokens=max_tokens, ignore_eos=True, stop_token_ids=[STOP]),
                                          None, arrival_time=0.0))
        if step in aborts and aborts[step] in scheduler.requests:  # the client went away
            scheduler.finish_requests(aborts[step], RequestStatus.FINISHED_ABORTED)
        try:
            output = scheduler.schedule()
        except RuntimeError as e:
            return {"error": str(e), "produced": produced}
        this = step_output(scheduler, output, lambda rid, made: STOP if made == stop_after.get(rid, 0) else 7)
        if previous is not None:
            finished = scheduler.update_from_output(*previous)
            for engine_outputs in finished.values():
                for o in engine_outputs.outputs:
                    produced[o.request_id] = produced.get(o.request_id, 0) + len(o.new_token_ids)
        previous = (output, this) if this is not None else None
        step += 1
    scheduler._catch_up()  # what vLLM freed since its last step
    mirror = scheduler.mirror
    left = {"mirror_sequences": len(mirror.seqs) + len(mirror.held) + len(mirror.parked),
            "mirror_free": mirror.blocks.num_free, "vllm_free": scheduler.kv_cache_manager.block_pool.get_num_free_blocks(),
            "kv_blocks": mirror.blocks.num_blocks}
    scheduler.shutdown()
    return {"produced": produced, "steps": step, "left": left}


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    out = Path(spec["out"])
    model = write_model_config(out / "model")
    for name, knobs in spec["policies"].items():
        result = run(spec, name, dict(knobs), model, out)
        (out / f"{name}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
