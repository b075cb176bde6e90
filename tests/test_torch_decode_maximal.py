"""Decode-maximal batches (the first Sarathi paper: one prefill chunk with decodes riding on it) run
through the torch executor give the tokens that unchunked prefills give: chunking a prompt and
piggybacking decodes on its chunks changes the schedule, never the greedy outputs."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from engines.executors.torch import TorchExecutor  # noqa: E402
from engines.executors.torch.loop import OfflineRequest, run_to_completion  # noqa: E402
from engines.schedulers import EngineConfig, SchedulerConfig, make_engine  # noqa: E402
from tests.test_torch_helpers import tiny_llama  # noqa: E402

MAX_LEN = 256
B = 4


def _requests():
    gen = torch.Generator().manual_seed(11)
    return [OfflineRequest(i, tuple(torch.randint(3, 256, (40 + 23 * i,), generator=gen).tolist()), 30)
            for i in range(7)]


def _run(executor, cfg):
    engine = make_engine(EngineConfig(cfg, executor.kv_capacity_tokens, MAX_LEN))
    batches = []
    schedule = engine.policy.schedule

    def recording(e):
        batch = schedule(e)
        if batch is not None:
            batches.append(batch)
        return batch

    engine.policy.schedule = recording
    stats = run_to_completion(engine, executor, _requests())
    assert engine.blocks.num_free == engine.blocks.num_blocks and not engine.has_unfinished
    return stats.outputs, batches


@pytest.fixture(scope="module")
def executor():
    return TorchExecutor(tiny_llama(), dtype="float32", device="cpu", kv_capacity_tokens=4096)


def test_decode_maximal_gives_the_tokens_of_unchunked_prefills(executor):
    whole, whole_batches = _run(executor, SchedulerConfig("orca_worst", max_num_seqs=B))
    assert all(b.is_decode_only or not b.num_decodes for b in whole_batches)  # never a chunk, never mixed
    for tile in (0, 16):
        chunked, batches = _run(executor, SchedulerConfig("decode_maximal", max_num_seqs=B, chunk_size=24,
                                                           tile_tokens=tile))
        assert chunked == whole
        assert all(len(v) == 30 for v in chunked.values())
        # the schedule really was decode-maximal: chunks of a prompt with B - 1 decodes riding on them
        mixed = [b for b in batches if b.has_prefill and b.num_decodes == B - 1]
        assert mixed and all(sum(b.is_prefill) <= 1 for b in batches)
        assert any(b.num_prefill_tokens < b.seqs[-1].prompt_len for b in mixed)
        if tile:
            assert any(b.num_tokens == 16 for b in mixed)  # 24 + 3 cut to one tile: 13 + 3


def test_orca_best_gives_the_same_tokens(executor):
    whole, _ = _run(executor, SchedulerConfig("orca_worst", max_num_seqs=B))
    best, batches = _run(executor, SchedulerConfig("orca_best", max_num_seqs=B))
    assert best == whole and any(b.has_prefill and b.num_decodes for b in batches)
