"""The host KV tier under the prefix cache (issue 39 item 2): evicted blocks go to host memory,
LRU within its own capacity; a prompt that reaches them loads them instead of computing them; the
simulator prices each iteration's loads and stores over PCIe; off by default; bad input refused."""
from __future__ import annotations

import numpy as np
import pytest

from engines.core import HostTier, PrefixCachingBlockManager, Segments, Sequence
from engines.perf import Deployment
from engines.perf.offload import plan_kv_offload
from engines.schedulers import EngineConfig, SchedulerConfig, make_engine
from harness.backends.sim import simulate
from harness.backends.sim.timer import OffloadPriced
from harness.records import RequestSpec
from tests.cli import assert_refused

BS = 16


def _seq(i, seg, n, out=2):
    return Sequence(i, n, out, Segments(((seg, n), (1000 + i, out)), BS))


def _finish(bm, seq):
    bm.admit(seq)
    seq.num_computed = seq.prefill_target
    bm.free(seq)


def test_evicted_blocks_go_to_the_tier_and_come_back_as_loads():
    tier = HostTier(8)
    bm = PrefixCachingBlockManager(8, BS, tier=tier)
    _finish(bm, _seq(0, 1, 64))  # 4 blocks cached, evictable
    _finish(bm, _seq(1, 2, 128))  # 8 blocks: A's 4 evicted -> stored in the tier
    assert tier.stats.stores == 4 and len(tier) == 4 and tier.drain() == (0, 4) and tier.drain() == (0, 0)
    again = _seq(2, 1, 80)  # A's prompt and one more block: 4 blocks found in host memory
    assert bm.lookup(again) == [] and again.num_computed == 4 * BS  # loaded, not computed
    bm.admit(again)
    assert tier.drain()[0] == 4 and bm.stats.host_hits == 4 * BS and bm.stats.hits == 0
    assert again.cached_tokens == 4 * BS  # what the request did not prefill
    bm.register(again)  # the loaded blocks are GPU blocks of their hash again
    assert bm.cached_prefix([again.tokens.block_hash(i) for i in range(5)]) == 4


def test_the_tier_is_lru_and_copies_a_block_once():
    tier = HostTier(2)
    for h in (1, 2, 1):  # 1 stored, 2 stored, 1 again: already there, no copy, most recent
        tier.store(h)
    assert tier.stats.stores == 2 and tier.drain() == (0, 2)
    tier.store(3)  # over capacity: 2, the least recently used, goes
    assert 2 not in tier and 1 in tier and 3 in tier and tier.stats.evictions == 1
    tier.load(1)
    tier.store(4)
    assert 3 not in tier and 1 in tier  # a load counts as a use
    with pytest.raises(ValueError):
        HostTier(0)


def test_gpu_hits_first_then_the_tier_then_compute():
    tier = HostTier(16)
    bm = PrefixCachingBlockManager(6, BS, tier=tier)
    for h in (Segments(((1, 96),), BS).block_hash(i) for i in range(2, 4)):
        tier.store(h)  # blocks 2 and 3 of segment 1 in host memory only
    _finish(bm, _seq(0, 1, 33))  # blocks 0, 1 on the GPU
    s = _seq(1, 1, 96)
    assert len(bm.lookup(s)) == 2 and s.num_computed == 4 * BS  # 2 hits, 2 loads, then compute from block 4


def test_no_tier_no_change():
    bm = PrefixCachingBlockManager(8, BS)
    _finish(bm, _seq(0, 1, 64))
    _finish(bm, _seq(1, 2, 128))
    s = _seq(2, 1, 80)
    assert bm.lookup(s) == [] and s.num_computed == 0 and bm.tier is None and bm.stats.host_hits == 0
    with pytest.raises(ValueError, match="needs prefix caching"):
        make_engine(EngineConfig(SchedulerConfig("sarathi"), 4096, 1024, BS, host_kv_blocks=8))


class _Timer:  # 1 ms an iteration plus 0.1 ms a new token
    def batch_times(self, new_tokens, context_lens):
        return 1e-3 + 1e-4 * np.asarray(new_tokens, dtype=np.float64).sum(axis=-1)

    def pp_send_time(self, tokens):
        return 0.0


class _Offload:  # 10 ms a block loaded, 1 ms a block stored (full duplex: the longer)
    def seconds(self, loads, stores):
        return max(loads * 1e-2, stores * 1e-3)


def test_the_simulator_prices_loads_and_stores_in_the_iteration_that_moves_them():
    cfg = SchedulerConfig("sarathi", max_num_seqs=8, token_budget=4096)
    reqs = [RequestSpec(0, 0.0, 64, 2, prompt_segments=((1, 64),), output_segment=11),
            RequestSpec(1, 1.0, 96, 2, prompt_segments=((2, 96),), output_segment=12),  # evicts request 0's blocks
            RequestSpec(2, 2.0, 80, 2, prompt_segments=((1, 64), (3, 16)), output_segment=13)]
    engine = make_engine(EngineConfig(cfg, 128, 128, BS, prefix_caching=True, host_kv_blocks=64))  # 8 GPU blocks
    records = simulate(reqs, engine, OffloadPriced(_Timer(), _Offload()))
    tier = engine.blocks.tier
    # request 1's 6 prompt blocks took the 4 free ones and 2 of request 0's cached blocks, evicted
    # tail first (3, 2: stored), its decode one more (1: stored); request 2 finds block 0 on the
    # GPU and loads blocks 1-3 from host memory
    assert (tier.stats.loads, records[2].cached_tokens, engine.blocks.stats.host_hits) == (3, 64, 48)
    # its prefill: 16 new tokens after 64 found, its 3 loads paid in that iteration (the stores
    # its allocation causes move at the same time, one way each): 1 ms + 1.6 ms + max(30 ms, stores)
    first = records[2].first_token_s - records[2].first_scheduled_s
    assert first == pytest.approx(1e-3 + 16 * 1e-4 + 3 * 1e-2)
    # request 1's prefill paid its 2 stores: 1 ms + 9.6 ms + 2 ms; its decode the third
    assert records[1].first_token_s - records[1].first_scheduled_s == pytest.approx(1e-3 + 96 * 1e-4 + 2 * 1e-3)
    assert np.diff(records[1].token_times_s)[0] == pytest.approx(1e-3 + 1e-4 + 1e-3)
    with pytest.raises(ValueError, match="needs a timer"):
        simulate(reqs, make_engine(EngineConfig(cfg, 128, 128, BS, prefix_caching=True, host_kv_blocks=64)), _Timer())


def test_pcie_price_and_host_capacity_of_a_deployment():
    d = Deployment.create(model="yi-34b", gpu="a100-80g-sxm", tp=2)
    o = plan_kv_offload(d, 16)
    per_gpu = d.model.kv_bytes_per_token_per_gpu(2, 1) * 16
    assert (o.lane_bytes_per_block, o.host_bytes_per_block) == (per_gpu, 2 * per_gpu)
    assert o.link.name.startswith("pcie") and o.blocks_in(1) == (1 << 30) // (2 * per_gpu)
    assert o.seconds(0, 0) == 0 and o.seconds(10, 0) == o.seconds(0, 10) == o.seconds(10, 10) > o.seconds(5, 0) > 0


SMALL = ["experiment=yi34b_tp2_strict", "scheduler=[sarathi]", "search.num_requests=64"]


@pytest.mark.parametrize("args,message", [
    (["engine.prefix_caching=true", "engine.kv_offload_gib=2048"], "is larger than the node's host memory"),
    (["engine.prefix_caching=true", "engine.kv_offload_gib=64", "engine.host_memory_gib=32"], "larger than the node's host memory"),
    (["engine.kv_offload_gib=64"], "needs prefix caching on"),
    (["engine.prefix_caching=true", "engine.kv_offload_gib=-1"], "kv_offload_gib must be >= 0"),
    (["engine.prefix_caching=true", "engine.kv_offload_gib=8", "backend=live"], "not backend=live"),
])
def test_bad_tier_one_line_exit_2_nothing_written(tmp_path, args, message):
    assert_refused(tmp_path, [*SMALL, *args], message)
