"""Six behaviours an audit of the suite found unguarded (issue 37): each test here failed when the
behaviour was broken on purpose in the code, and passes on the code as it is.

1. the batch-size cap B of the reserved-batch policies, with KV room for more than B;
2. a waiting sequence's prefix-cache lookup sees blocks registered after it looked;
3. equal tokens behind different prefixes hash apart (no KV computed under another prefix is found);
4. the stall rule measures silence since a stream's last bytes, not its first;
5. a search breaks on wrong answers only when the start rate and half of it both fail on errors alone;
6. `think: fixed` session think times are used as given.
"""
from __future__ import annotations

import numpy as np
import pytest

from engines.core import PrefixCachingBlockManager, Segments, Sequence, TokenIds
from engines.schedulers import EngineConfig, SchedulerConfig, make_engine
from harness.backends.base import BackendRun
from harness.config import compose
from harness.loadgen.http import Exchange
from harness.loadgen.run import _stalled
from harness.records import RequestRecord
from harness.config import plan_experiment
from harness.search.probe import SearchBroken, search_capacity
from harness.workload import load_workload, requests_at_rate
from tests.policy_workloads import drive

MAX_LEN = 512
BS = 16


# -- 1 ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("policy", ("decode_maximal", "orca_best", "orca_worst"))
def test_reserved_batch_policies_cap_the_batch_at_b_with_kv_room_for_more(policy):
    """KV for 4 B sequences of max_model_len: the reservation alone would let 4 B run, so only the
    policy's own cap keeps B (the first Sarathi paper's batch size, its throughput figures)."""
    b = 3
    cfg = SchedulerConfig.shared(policy, max_num_seqs=b, chunk_size=64, tile_tokens=0)
    engine = make_engine(EngineConfig(cfg, 4 * b * MAX_LEN, MAX_LEN))
    peak = [0]

    def check(engine, batch, _):
        assert len(engine.running) <= b and len(batch) <= b, (len(engine.running), len(batch))
        peak[0] = max(peak[0], len(engine.running))

    _, produced = drive(engine, [(100, 40)] * 20, check)
    assert produced == {i: 40 for i in range(20)}
    assert peak[0] == b  # the cap was reached: the check above had something to hold back


# -- 2 ---------------------------------------------------------------------------------------
def test_a_waiting_turn_finds_blocks_registered_after_its_lookup():
    """Turn 2 of a conversation (turn 1's 64 tokens + 32 of its own) waits for KV while turn 1
    prefills; its failed admission looked the cache up before turn 1's blocks were registered. The
    next iteration must look again: it finds 4 blocks (64 tokens) and fits beside turn 1."""
    cfg = SchedulerConfig.shared("sarathi", max_num_seqs=8, token_budget=512)
    engine = make_engine(EngineConfig(cfg, 8 * BS, 128, prefix_caching=True))  # 8 blocks: turn 1 takes 4, turn 2 alone would need 6
    first = Sequence(0, 64, 4, TokenIds(range(64), BS))
    second = Sequence(1, 96, 2, TokenIds(list(range(64)) + list(range(1000, 1032)), BS))
    engine.add(first)
    engine.add(second)
    batch = engine.schedule()
    assert [s.seq_id for s in batch.seqs] == [0] and engine.waiting[0] is second  # it looked and waited
    engine.complete(batch)  # turn 1's prompt computed: its 4 blocks registered
    batch = engine.schedule()
    assert second in batch.seqs, "turn 2 did not see turn 1's blocks registered after its lookup"
    assert second.cached_tokens == 64 and engine.blocks.stats.hit_blocks == 4


# -- 3 ---------------------------------------------------------------------------------------
def test_equal_tokens_behind_different_prefixes_hash_apart():
    x = list(range(500, 500 + BS))
    a, b = TokenIds([1] * BS + x, BS), TokenIds([2] * BS + x, BS)
    assert a.block_hash(0) != b.block_hash(0) and a.block_hash(1) != b.block_hash(1)
    same = TokenIds([1] * BS + x, BS)
    assert same.block_hash(1) == a.block_hash(1)  # what the chaining keeps: shared prefixes hash equal
    # Segments (the simulator's identity): segment 9 at the same offset, behind segments 1 and 2.
    s1, s2 = Segments(((1, BS), (9, 2 * BS)), BS), Segments(((2, BS), (9, 2 * BS)), BS)
    assert all(s1.block_hash(i) != s2.block_hash(i) for i in range(3))


def test_a_prefix_hit_never_crosses_into_kv_computed_behind_another_prefix():
    """[P, X] and [Q, Y] are cached; [P, Y] finds P's block and not Y's, whose KV was computed
    after Q (a wrong answer in a real server)."""
    p, q, x, y = ([k] * BS for k in (1, 2, 3, 4))
    blocks = PrefixCachingBlockManager(16, BS)
    for i, ids in enumerate((p + x, q + y)):
        seq = Sequence(i, 2 * BS, 1, TokenIds(ids, BS))
        blocks.admit(seq)
        seq.num_computed = 2 * BS
        blocks.free(seq)  # registers both blocks, keeps them evictable
    probe = Sequence(2, 3 * BS, 1, TokenIds(p + y + [5] * BS, BS))
    assert len(blocks.lookup(probe)) == 1 and probe.num_computed == BS


# -- 4 ---------------------------------------------------------------------------------------
def test_the_stall_rule_measures_silence_since_the_last_bytes():
    x = Exchange(b"")
    assert not _stalled(x, 100.0, 2.0)  # nothing arrived yet: the request timeout's business
    x.pieces += [(0.0, b"a"), (9.0, b"b")]
    assert not _stalled(x, 10.0, 2.0)  # 10 s since the first bytes, 1 s since the last
    assert _stalled(x, 11.5, 2.0)
    assert not _stalled(x, 1e9, None)


# -- 5 ---------------------------------------------------------------------------------------
def _search(kinds: dict[int, str]) -> tuple[list[float], SearchBroken | None]:
    """A search whose probe k (in the order run) is `kinds[k]`: "slow" fails on latency alone (every
    request done, TBT 10x the SLO), "wrong" on its failed requests alone (half HTTP 500, the rest
    fast). The rates it ran, and how it broke."""
    plan = plan_experiment(compose(["experiment=yi34b_tp2_strict", "search.num_requests=16", "search.start_qps=8"]))
    slo = plan.slo.tbt_s
    rates: list[float] = []

    def run(specs, label):
        kind = kinds.get(len(rates), "wrong")
        rates.append(float(label.split("@ ")[1].split(" ")[0]))
        gap = 10 * slo if kind == "slow" else slo / 10
        records = []
        for r in specs:
            times = r.arrival_s + 0.01 + gap * np.arange(r.output_len, dtype=np.float64)
            error = "HTTP 500: boom" if kind == "wrong" and r.request_id % 2 else None
            records.append(RequestRecord(r.request_id, r.arrival_s, r.prompt_len, r.output_len, r.arrival_s,
                                         float(times[0]), float(times[-1]), times, error=error))
        return BackendRun(records)

    try:
        search_capacity(plan, "sarathi", run)
    except SearchBroken as e:
        return rates, e
    return rates, None


def test_a_latency_failure_then_one_errors_only_probe_does_not_break_the_search():
    rates, broken = _search({0: "slow", 1: "wrong"})
    assert broken is not None and "answers wrongly" in str(broken)
    assert rates == [8.0, 4.0, 2.0]  # broken only by the 2nd errors-only probe in a row
    rates, broken = _search({})  # errors alone at the start rate and at half of it: broken at once
    assert rates == [8.0, 4.0] and broken is not None


# -- 6 ---------------------------------------------------------------------------------------
def test_fixed_think_times_are_used_as_given():
    sessions = {"kind": "agent", "turns": 4, "first_user_tokens": 20, "user_tokens": 10, "output_tokens": 8,
                "think_time_s": 1.25, "think": "fixed"}
    w = load_workload({"name": "t", "max_total_tokens": 4096, "sessions": sessions}, 40, 0)
    reqs = requests_at_rate(w, {"name": "poisson"}, 2.0, 0)
    later = [q for q in reqs if q.after is not None]
    assert len(later) == 30 and all(q.think_s == 1.25 for q in later)
    assert all(q.think_s == 0 for q in reqs if q.after is None)
