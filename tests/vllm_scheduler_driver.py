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

STOP = 9  # the fake model's stop token


def model_dir(folder: Path) -> str:
    """A model config only (no weights: nothing runs a model here), as scripts/make_tiny_model.py shapes it."""
    from transformers import LlamaConfig
    LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
                vocab_size=2048, max_position_embeddings=4096).save_pretrained(folder)
    return str(folder)


def build(v: dict, model: str):
    import torch
    from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    from engines.external.vllm_scheduler.scheduler import PolicyScheduler

    blocks = v["kv_blocks"] + 1  # vLLM keeps block 0 as its null block
    model_cfg = ModelConfig(model=model, max_model_len=v["max_model_len"], skip_tokenizer_init=True, dtype="float32")
    sched_cfg = SchedulerConfig(max_num_seqs=v["max_num_seqs"], max_num_batched_tokens=v["max_num_batched_tokens"],
                                max_model_len=v["max_model_len"], enable_chunked_prefill=True,
                                is_encoder_decoder=False, async_scheduling=True)
    cache_cfg = CacheConfig(block_size=v["block_size"], cache_dtype="auto", enable_prefix_caching=v.get("prefix_caching", False))
    cache_cfg.num_gpu_blocks = blocks
    config = VllmConfig(scheduler_config=sched_cfg, model_config=model_cfg, cache_config=cache_cfg,
                        device_config=DeviceConfig("cpu"))
    kv = KVCacheConfig(num_blocks=blocks, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(
        ["layer"], FullAttentionSpec(block_size=v["block_size"], num_kv_heads=1, head_size=64, dtype=torch.float32))])
    return PolicyScheduler(vllm_config=config, kv_cache_config=kv, structured_output_manager=StructuredOutputManager(config),
                           block_size=v["block_size"], log_stats=False)


def run(spec: dict, name: str, knobs: dict, model: str, out: Path) -> dict:
    from vllm import SamplingParams
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import Request

    trace = out / f"{name}.trace.jsonl"
    settings = {**spec["vllm"], **knobs.pop("vllm", {})}  # an entry may change vLLM's settings
    workload = [(list(w) + [0, -1])[:5] for w in knobs.pop("workload", spec["workload"])]
    module = knobs.pop("module", None)
    os.environ["HARNESS_VLLM_POLICY"] = json.dumps({"policy": knobs.pop("policy", name), "knobs": knobs, "module": module})
    os.environ["HARNESS_VLLM_TRACE"] = str(trace)
    try:
        scheduler = build(settings, model)
    except (ValueError, ImportError) as e:
        return {"refused": str(e)}
    from vllm.v1.request import RequestStatus

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
        partial = {r for r in output.num_scheduled_tokens if scheduler.requests[r].is_prefill_chunk}
        # the token each request makes: STOP as its `stop_after`-th output token, 7 otherwise
        made = {r: len(scheduler.requests[r].output_token_ids) + scheduler.requests[r].num_output_placeholders
                for r in output.num_scheduled_tokens}
        if previous is not None:
            finished = scheduler.update_from_output(*previous)
            for engine_outputs in finished.values():
                for o in engine_outputs.outputs:
                    produced[o.request_id] = produced.get(o.request_id, 0) + len(o.new_token_ids)
        ids = list(output.num_scheduled_tokens)
        previous = (output, ModelRunnerOutput(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
                                              sampled_token_ids=[[] if r in partial else
                                                                 [STOP if made[r] == stop_after.get(r, 0) else 7]
                                                                 for r in ids])) if ids else None
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
    model = model_dir(out / "model")
    for name, knobs in spec["policies"].items():
        result = run(spec, name, dict(knobs), model, out)
        (out / f"{name}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
