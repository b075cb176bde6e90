"""The torch executor under the engine core: greedy outputs are a property of the model and the
prompt, not of the schedule (sarathi chunks, vllm preempts, orca mixes whole prefills), decodes
through the paged cache agree with recomputing from scratch and with transformers (sliding
window included), seeds make sampling reproducible, EOS stops a request, and every KV block is
free after a run."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from engines.executors.base import SamplingParams  # noqa: E402
from engines.executors.torch import TorchExecutor  # noqa: E402
from engines.executors.torch.loop import OfflineRequest, run_to_completion  # noqa: E402
from engines.schedulers import EngineConfig, SchedulerConfig, make_engine  # noqa: E402
from tests.policy_workloads import BUILT_IN  # noqa: E402
from tests.test_torch_helpers import prefill_logits, randomize_, tiny_llama  # noqa: E402

MAX_LEN = 256


def _requests(n=7, output_len=9, sampling=SamplingParams()):
    gen = torch.Generator().manual_seed(5)
    reqs = []
    for i in range(n):
        plen = 5 + 17 * i  # 5 .. 107: single-block to multi-chunk prompts
        prompt = tuple(torch.randint(3, 256, (plen,), generator=gen).tolist())
        reqs.append(OfflineRequest(i, prompt, output_len, sampling=sampling))
    return reqs


def _run(executor, policy, reqs, kv_tokens=None, max_len=MAX_LEN, **cfg):
    cfg = {"max_num_seqs": 4, "token_budget": 32, **cfg}
    engine = make_engine(EngineConfig(SchedulerConfig.shared(policy, **cfg), kv_tokens or executor.kv_capacity_tokens, max_len))
    stats = run_to_completion(engine, executor, reqs)
    assert engine.blocks.num_free == engine.blocks.num_blocks, "KV blocks leaked"
    assert not engine.has_unfinished and not executor._tokens
    return stats, engine


@pytest.fixture(scope="module")
def executor():
    return TorchExecutor(tiny_llama(), dtype="float32", device="cpu", kv_capacity_tokens=4096)


@pytest.fixture(scope="module")
def greedy_outputs(executor):
    stats, _ = _run(executor, "sarathi", _requests())
    return stats.outputs


@pytest.mark.parametrize("policy", [p for p in BUILT_IN if p != "sarathi"])
def test_greedy_outputs_identical_under_every_policy(executor, greedy_outputs, policy):
    stats, _ = _run(executor, policy, _requests(), max_num_batched_tokens=MAX_LEN if policy == "vllm" else None)
    assert stats.outputs == greedy_outputs
    assert all(len(v) == 9 for v in stats.outputs.values())


def test_preemption_by_recompute_keeps_outputs(executor, greedy_outputs):
    # 12 blocks of 16 tokens for 7 requests of up to 115 tokens: vLLM must preempt and recompute.
    stats, engine = _run(executor, "vllm", _requests(), kv_tokens=12 * 16, max_num_seqs=7,
                         max_len=128, max_num_batched_tokens=128)
    assert engine.num_preemptions > 0
    assert stats.outputs == greedy_outputs


def test_decodes_match_recomputing_from_scratch(executor, greedy_outputs):
    """Each greedy token equals the argmax of a full prefill of prompt + earlier outputs."""
    runner = executor._runner
    for req in _requests()[:3]:
        seq = list(req.prompt_token_ids)
        for tok in greedy_outputs[req.seq_id]:
            logits = prefill_logits(runner, seq, chunk=len(seq), first_block=200)
            assert int(logits[-1].argmax()) == tok
            seq.append(tok)


def test_sliding_window_decode_matches_transformers(tmp_path):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("safetensors")
    hf = transformers.MistralForCausalLM(transformers.MistralConfig(
        vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=128, max_position_embeddings=512, sliding_window=20)).eval()
    randomize_(hf, seed=3)
    hf.save_pretrained(tmp_path)
    prompt = list(range(10, 40))  # 30 tokens, then 25 decodes: decodes slide the window too
    want, seq = [], list(prompt)
    with torch.no_grad():
        for _ in range(25):
            want.append(int(hf(torch.tensor([seq])).logits[0, -1].argmax()))
            seq.append(want[-1])
    ex = TorchExecutor(tmp_path, dtype="float32", device="cpu", kv_capacity_tokens=1024)
    assert ex.config.sliding_window == 20
    for policy in ("sarathi", "vllm"):
        stats, _ = _run(ex, policy, [OfflineRequest(0, tuple(prompt), 25)], token_budget=8)
        assert stats.outputs[0] == want


def test_seeded_sampling_is_reproducible_across_policies(executor):
    sampling = SamplingParams(temperature=0.8, top_p=0.9, seed=1234)
    a, _ = _run(executor, "sarathi", _requests(sampling=sampling))
    b, _ = _run(executor, "orca", _requests(sampling=sampling))
    assert a.outputs == b.outputs
    other = SamplingParams(temperature=0.8, top_p=0.9, seed=99)
    c, _ = _run(executor, "sarathi", _requests(sampling=other))
    assert c.outputs != a.outputs


def test_top_p_near_zero_is_greedy(executor, greedy_outputs):
    stats, _ = _run(executor, "sarathi", _requests(sampling=SamplingParams(temperature=1.0, top_p=1e-6, seed=7)))
    assert stats.outputs == greedy_outputs


def test_eos_stops_a_request_unless_ignored(greedy_outputs):
    eos = greedy_outputs[2][3]  # request 2 makes this token 4th
    ex = TorchExecutor(tiny_llama(eos_token_ids=(eos,)), dtype="float32", device="cpu", kv_capacity_tokens=4096)
    stats, _ = _run(ex, "sarathi", _requests(sampling=SamplingParams(ignore_eos=False)))
    out = stats.outputs[2]
    assert out == greedy_outputs[2][:out.index(eos) + 1] and len(out) <= 4
    stats, _ = _run(ex, "sarathi", _requests(sampling=SamplingParams(ignore_eos=True)))
    assert stats.outputs == greedy_outputs


def test_made_up_prompts_are_seeded_and_avoid_special_tokens(executor):
    reqs = [OfflineRequest(i, None, 3, prompt_len=40) for i in range(3)]
    a, _ = _run(executor, "sarathi", reqs)
    b, _ = _run(executor, "vllm", reqs, max_num_batched_tokens=MAX_LEN)
    assert a.outputs == b.outputs


def test_abort_in_flight_is_ignored(executor):
    engine = make_engine(EngineConfig(SchedulerConfig("sarathi", token_budget=32), executor.kv_capacity_tokens, MAX_LEN))
    from engines.core import Sequence

    executor.add_request(100, list(range(3, 50)), SamplingParams())
    engine.add(Sequence(100, 47, 5))
    executor.add_request(101, list(range(3, 20)), SamplingParams())
    engine.add(Sequence(101, 17, 5))
    batch = engine.schedule()
    pending = executor.submit(batch)  # in flight: the server aborts on a client disconnect
    engine.abort(100)
    executor.free(100)
    assert pending.result()[0] is None  # a non-final chunk of 100
    engine.complete(batch)
    batch = engine.schedule()
    engine.abort(101)  # aborted between schedule and execute
    executor.free(101)
    assert executor.execute(batch) == [None]
    engine.complete(batch)
    assert engine.blocks.num_free == engine.blocks.num_blocks


def test_catalog_model_by_name():
    ex = TorchExecutor.from_config(model="tiny-llama", dtype="float32", device="cpu", kv_capacity_tokens=512)
    assert ex.config.num_layers == 2 and ex.config.vocab_size == 32000
    stats, _ = _run(ex, "sarathi", [OfflineRequest(0, None, 4, prompt_len=20)])
    assert len(stats.outputs[0]) == 4


def test_realtime_time_limit_stops_and_frees(executor):
    from engines.executors.torch.loop import run_realtime

    engine = make_engine(EngineConfig(SchedulerConfig("sarathi", token_budget=32), executor.kv_capacity_tokens, MAX_LEN))
    t = iter(range(10**6))
    reqs = [OfflineRequest(i, None, 50, prompt_len=40, arrival_s=float(i)) for i in range(5)]
    # A fake clock ticking one second per reading: the limit falls mid-run.
    stats = run_realtime(engine, executor, reqs, clock=lambda: float(next(t)), sleep=lambda s: None,
                         time_limit_s=20.0)
    assert stats.unfinished
    assert engine.blocks.num_free == engine.blocks.num_blocks and not executor._tokens
