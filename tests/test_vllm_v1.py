"""scheduler=vllm_v1 (engines/schedulers/vllm_v1.py): its batches on small hand-made states, each the
batch vLLM V1's Scheduler.schedule makes of that state (v1/core/sched/scheduler.py, 0.19 and 0.32),
its flags as `vllm serve` takes them, and the planner's grid of it."""
import pytest

from common.errors import HarnessError
from engines.core import Sequence
from engines.external.vllm import policy_flags
from engines.schedulers import EngineConfig, SchedulerConfig, make_engine
from harness.planner.settings import PlanSettings
from harness.planner.space import check_grid_policies, scheduler_grid


def engine(kv=65536, max_model_len=4096, **knobs):
    return make_engine(EngineConfig(SchedulerConfig("vllm_v1", **knobs), kv, max_model_len))


def add(e, *lengths):
    for i, (p, o) in enumerate(lengths, start=len(e.seqs)):
        e.add(Sequence(i, p, o))


def step(e):
    """One iteration: the batch as (seq_id, new tokens) pairs, then completed."""
    b = e.schedule()
    e.complete(b)
    return [(s.seq_id, n) for s, n in zip(b.seqs, b.new_tokens)]


def test_running_requests_first_then_waiting_ones_chunked_into_the_budget():
    e = engine(max_num_batched_tokens=2048)
    add(e, (10, 50), (20, 50), (3000, 5))
    assert step(e) == [(0, 10), (1, 20), (2, 2018)]  # FCFS admission, the last prompt chunked to the budget
    assert step(e) == [(0, 1), (1, 1), (2, 982)]  # decodes and the ongoing prefill, in priority order


@pytest.mark.parametrize("release, alone", [("0.32", 2048), ("0.19", 512)])
def test_the_long_prefill_cap_and_when_it_applies(release, alone):
    e = engine(long_prefill_token_threshold=512, release=release)
    add(e, (3000, 5), (1000, 5))
    assert step(e) == [(0, 512), (1, 512)]  # two prompts progress in one step (Sarathi: 2048 of the first)
    e = engine(long_prefill_token_threshold=512, release=release)
    add(e, (3000, 5))
    assert step(e) == [(0, alone)]  # 0.32: not applied to a request alone (no one to starve)


@pytest.mark.parametrize("release", ["0.19", "0.32"])
def test_the_long_prefill_cap_bounds_every_chunk_of_a_long_prefill(release):
    """Not only the first chunk (the WAITING walk, vLLM 0.32's v1/core/sched/scheduler.py l. 1155-1156):
    a prefill running on is capped too (the RUNNING walk, l. 708-709: `if 0 < long_prefill_token_threshold
    < num_new_tokens: num_new_tokens = long_prefill_token_threshold`), so two 3000-token prompts progress
    512 tokens each a step, to their last chunks, and no step spends the budget on one of them."""
    e = engine(long_prefill_token_threshold=512, release=release)
    add(e, (3000, 50), (3000, 50))
    chunks: dict[int, list[int]] = {0: [], 1: []}
    while any(s.is_prefill for s in e.seqs.values()):
        b = e.schedule()
        for s, n, prefill in zip(b.seqs, b.new_tokens, b.is_prefill):
            if prefill:
                chunks[s.seq_id].append(n)
        e.complete(b)
    assert chunks == {0: [512] * 5 + [440], 1: [512] * 5 + [440]}


def test_a_request_whose_kv_does_not_fit_preempts_the_last_admitted_and_nothing_is_admitted():
    """5 blocks of 16: three 16-token prompts take 3; at their first decodes two blocks remain, so
    the third preempts itself (the last admitted) and the step admits nobody, then repeats."""
    e = engine(kv=80, max_model_len=40, max_num_batched_tokens=64, max_num_seqs=4)
    add(e, (16, 20), (16, 20), (16, 20))
    assert step(e) == [(0, 16), (1, 16), (2, 16)]
    assert step(e) == [(0, 1), (1, 1)]
    assert e.num_preemptions == 1 and [s.seq_id for s in e.waiting] == [2]
    assert e.policy.decode_batch_repeats(e) is False  # the next step may admit (vLLM's rule)
    assert step(e) == [(0, 1), (1, 1)] and e.policy.decode_batch_repeats(e) is True


def test_a_resumed_request_runs_after_those_admitted_before_it():
    """V1's running list is the order of admission: a preempted request, admitted again, is walked
    after a later arrival, whose decode comes first; the budget ends the walk."""
    e = engine(max_num_batched_tokens=40, max_num_seqs=2)
    add(e, (40, 50), (8, 50))
    assert step(e) == [(0, 40)]  # the budget is spent: the second waits
    assert step(e) == [(0, 1), (1, 8)]
    assert step(e) == [(0, 1), (1, 1)]
    e.preempt(e.seqs[0])  # as a KV shortage would: 43 tokens to recompute
    assert step(e) == [(1, 1), (0, 39)]
    assert step(e) == [(1, 1), (0, 4)]


def test_knobs_are_checked_as_vllm_checks_them():
    with pytest.raises(ValueError, match="must be >= max_num_seqs"):
        engine(max_num_batched_tokens=128, max_num_seqs=256)
    with pytest.raises(ValueError, match="long_prefill_token_threshold"):
        engine(long_prefill_token_threshold=8192)
    with pytest.raises(ValueError, match="release"):
        engine(release="0.7")


def test_its_flags_are_vllm_serve_flags():
    assert policy_flags(SchedulerConfig("vllm_v1"), 8192) == [
        "--enable-chunked-prefill", "--max-num-batched-tokens", "2048", "--max-num-seqs", "256"]
    cfg = SchedulerConfig("vllm_v1", max_num_batched_tokens=8192, max_num_seqs=1024, long_prefill_token_threshold=512)
    assert policy_flags(cfg, 8192) == ["--enable-chunked-prefill", "--max-num-batched-tokens", "8192",
                                       "--max-num-seqs", "1024", "--long-prefill-token-threshold", "512"]


def test_the_planner_grids_it_only_when_asked():
    assert not [n for n in scheduler_grid(PlanSettings()) if n.startswith("vllm_v1")]
    grid = scheduler_grid(PlanSettings(grid={"vllm_v1": {"max_num_batched_tokens": [2048, 8192], "max_num_seqs": [256]}}))
    assert grid["vllm_v1_b8192"] == {"policy": "vllm_v1", "max_num_batched_tokens": 8192, "max_num_seqs": 256}
    # a budget below the batch: the policy's constructor refuses it, named by its plan.grid key, before planning
    bad = scheduler_grid(PlanSettings(grid={"vllm_v1": {"max_num_batched_tokens": [128], "max_num_seqs": [256]}}))
    with pytest.raises(HarnessError, match=r"plan.grid.vllm_v1 .*max_num_batched_tokens \(128\) must be >= max_num_seqs"):
        check_grid_policies(bad, 4096)
