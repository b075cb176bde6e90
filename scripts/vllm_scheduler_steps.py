"""vLLM's own V1 scheduler, driven step by step on a synthetic stream: what it schedules, no model.

    $HARNESS_VLLM_PYTHON scripts/vllm_scheduler_steps.py < stream.json > steps.json

Run with the vLLM venv's python (scripts/setup_vllm_cpu.sh); of the project it imports the vLLM
plugin's `offline` module alone (engines/external/vllm_scheduler/offline.py), which builds the
scheduler as vLLM's own scheduler tests build it (tests/v1/core/utils.py create_scheduler: a
SchedulerConfig, a ModelConfig read from a config.json alone, a CacheConfig, a KVCacheConfig of
`num_blocks` blocks of one full-attention group, the first of them vLLM's null block) and gives the
fake model's output. Each step: the requests whose `arrival_step` has come are added (in stream
order), `Scheduler.schedule()` runs, and one sampled token goes to every request whose scheduled
tokens reach its end (a prefill's last chunk, or a decode); `update_from_output` then finishes the
requests that reached their `output_len` (max_tokens, ignore_eos). Synchronous scheduling
(async_scheduling=False, as in those tests).

stdin, JSON: a list of streams, each {"max_num_seqs", "max_num_batched_tokens", "long_prefill_token_threshold",
"num_blocks", "block_size", "max_model_len", "prefix_caching", "requests": [{"arrival_step",
"prompt_len", "output_len", "prompt" (optional token ids: equal ids make prefix hits)}]}.
stdout, JSON: {"version": vLLM's, "runs": [one per stream: [{"tokens": {index: tokens},
"preempted": [index, ...]} one per step]]} (requests named by their index in the stream).
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository: engines.external...offline
MAX_STEPS = 100_000  # a stream that never drains is a bug of this script or of the stream


def scheduler(spec: dict, folder: Path):
    from vllm.v1.core.sched.scheduler import Scheduler

    from engines.external.vllm_scheduler.offline import build_scheduler, write_model_config

    return build_scheduler(Scheduler, write_model_config(folder), kv_blocks=spec["num_blocks"] - 1,
                           block_size=spec["block_size"], max_model_len=int(spec["max_model_len"]),
                           max_num_seqs=spec["max_num_seqs"], max_num_batched_tokens=spec["max_num_batched_tokens"],
                           prefix_caching=bool(spec["prefix_caching"]),
                           long_prefill_token_threshold=spec["long_prefill_token_threshold"], async_scheduling=False)


def requests(spec: dict) -> list:
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.request import Request

    init_none_hash(sha256)
    hasher = get_request_block_hasher(spec["block_size"], sha256)
    out = []
    for i, r in enumerate(spec["requests"]):
        prompt = r.get("prompt") or [3 + (i * 7919 + k) % 2000 for k in range(r["prompt_len"])]  # distinct prompts
        params = SamplingParams(max_tokens=r["output_len"], ignore_eos=True)
        out.append(Request(str(i), list(prompt), params, None, arrival_time=float(i), block_hasher=hasher))
    return out


def run(spec: dict) -> list[dict]:
    from vllm.v1.outputs import ModelRunnerOutput

    from engines.external.vllm_scheduler.offline import step_output

    with tempfile.TemporaryDirectory() as folder:
        s = scheduler(spec, Path(folder))
    pending = sorted(zip((r["arrival_step"] for r in spec["requests"]), range(len(spec["requests"])), requests(spec)),
                     key=lambda a: (a[0], a[1]))
    steps, step = [], 0
    while (pending or s.has_unfinished_requests()) and step < MAX_STEPS:
        while pending and pending[0][0] <= step:
            s.add_request(pending.pop(0)[2])
        out = s.schedule()
        result = step_output(s, out) or ModelRunnerOutput(req_ids=[], req_id_to_index={}, sampled_token_ids=[])
        s.update_from_output(out, result)
        steps.append({"tokens": dict(out.num_scheduled_tokens),
                      "preempted": sorted(int(r) for r in (out.preempted_req_ids or ()))})
        step += 1
    if pending or s.has_unfinished_requests():
        raise SystemExit(f"the stream did not drain in {MAX_STEPS} steps")
    return steps


def main() -> int:
    import vllm
    json.dump({"version": vllm.__version__, "runs": [run(spec) for spec in json.load(sys.stdin)]}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
