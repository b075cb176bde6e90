"""The prefix cache never changes a request's tokens: real forward passes (tiny Llama, CPU, fp32)
with prefix caching give the greedy tokens of the same requests computed without it, while the
cached prompts really were skipped (conversation turns, a shared head, preemption under a small
KV cache)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from engines.executors.torch import TorchExecutor  # noqa: E402
from engines.executors.torch.loop import OfflineRequest, run_to_completion  # noqa: E402
from engines.schedulers import EngineConfig, SchedulerConfig, make_engine  # noqa: E402
from tests.test_torch_helpers import tiny_llama  # noqa: E402

MAX_LEN = 512


@pytest.fixture(scope="module")
def executor():
    return TorchExecutor(tiny_llama(), dtype="float32", device="cpu", kv_capacity_tokens=4096)


def _ids(n, seed):
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randint(3, 256, (n,), generator=gen).tolist())


def _rounds(executor, cfg, kv_tokens, rounds, caching=False):
    """Run each round of requests to completion on one engine (its cache carries over); a
    round's prompts may be built from earlier rounds' outputs (a conversation's next turn)."""
    engine = make_engine(EngineConfig(cfg, kv_tokens, MAX_LEN, prefix_caching=caching))
    outputs: dict[int, list[int]] = {}
    computed = 0
    for build in rounds:
        stats = run_to_completion(engine, executor, build(outputs))
        outputs.update(stats.outputs)
        computed += stats.tokens_computed
        assert engine.blocks.num_free == engine.blocks.num_blocks and not engine.has_unfinished
    return outputs, computed, engine


HEAD = _ids(100, 1)


def _conversation_rounds():
    first = lambda _: [OfflineRequest(0, HEAD + _ids(30, 2), 24), OfflineRequest(1, HEAD + _ids(7, 3), 20)]
    # turn 2 of request 0 echoes its answer; request 3 repeats a whole prompt (a full hit computes its last token)
    second = lambda out: [OfflineRequest(2, HEAD + _ids(30, 2) + tuple(out[0]) + _ids(11, 4), 16),
                          OfflineRequest(3, HEAD + _ids(7, 3), 12)]
    return [first, second]


@pytest.mark.parametrize("policy", ["sarathi", "vllm", "orca"])
def test_cached_prefixes_give_the_same_tokens(executor, policy):
    knobs = dict(max_num_seqs=8, token_budget=48, max_num_batched_tokens=512)  # each policy takes its own (orca: no budget)
    cfg = SchedulerConfig.shared(policy, **knobs)
    plain, plain_computed, _ = _rounds(executor, cfg, 4096, _conversation_rounds())
    cached, cached_computed, engine = _rounds(executor, cfg, 4096, _conversation_rounds(), caching=True)
    assert cached == plain
    stats = engine.blocks.stats
    # turn 2 finds 9 blocks of turn 1 (130 + 23 computed tokens), the repeat 6 of its 107; sarathi also
    # admits request 1 after request 0 computed the head
    assert stats.hits >= 144 + 96 and cached_computed == plain_computed - stats.hits


def test_preemption_with_a_cache_gives_the_same_tokens(executor):
    reqs = lambda _: [OfflineRequest(i, HEAD[:60] + _ids(40 + 9 * i, 10 + i), 60) for i in range(6)]
    cfg = dict(max_num_seqs=6, token_budget=64)
    plain, _, _ = _rounds(executor, SchedulerConfig("sarathi", **cfg), 36 * 16, [reqs])
    cached, _, engine = _rounds(executor, SchedulerConfig("sarathi", **cfg), 36 * 16, [reqs], caching=True)
    stats = engine.blocks.stats
    assert engine.num_preemptions > 0 and stats.evictions > 0
    assert cached == plain and stats.hits > 0 and stats.queries > 6 * 100  # readmissions looked up again
