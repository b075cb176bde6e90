"""Chunk runs (Engine.chunk_run_limit, the simulator's _chunk_run): a Sarathi batch of decodes and
one prompt's chunk filling the budget repeats, the decodes a token further and the prompt a chunk
further each row, for as many rows as the engine says; the simulator advances them in one step.
Checked against plain stepping: the engine's claim batch by batch, and the records bit for bit."""
from __future__ import annotations

import numpy as np
import pytest

from engines.core import Sequence
from harness.backends.sim import simulate
from harness.records import RequestSpec
from tests.policy_workloads import build

MAX_LEN = 4096


def _lengths(n: int, seed: int) -> list[tuple[int, int]]:
    rng = np.random.default_rng(seed)
    return [(int(p), int(o)) for p, o in zip(rng.integers(200, 3000, n), rng.integers(2, 120, n))]


class ContextTimer:
    """An iteration's cost growing with every item's tokens and context (no cap), so a row priced
    at another chunk's or decode's context is caught."""

    def batch_times(self, new_tokens, context_lens):
        new = np.asarray(new_tokens, dtype=np.int64)
        ctx = np.asarray(context_lens, dtype=np.int64)
        return 1e-3 + 2e-5 * np.sum(new, axis=-1) + 1e-9 * np.sum(new * (ctx + new), axis=-1) + 1e-8 * np.sum(ctx, axis=-1)

    def pp_send_time(self, num_tokens):
        return 0.0


@pytest.mark.parametrize("kv", [6000, 40_000])
def test_the_engine_says_only_what_stepping_then_does(kv):
    """Wherever chunk_run_limit says k > 1, the next k - 1 schedule() calls return that batch again,
    its decodes one context further and its chunk one chunk further each; some runs are long."""
    engine = build("sarathi", 256, 32, kv, MAX_LEN)
    for i, (p, o) in enumerate(_lengths(60, 3)):
        engine.add(Sequence(i, p, o))
    claims, longest = 0, 0
    while engine.has_unfinished:
        batch = engine.schedule()
        k = engine.chunk_run_limit(batch)
        engine.complete(batch)
        for i in range(1, k):
            again = engine.schedule()
            assert again.seqs == batch.seqs and again.new_tokens == batch.new_tokens
            assert again.context_lens == tuple(c + i for c in batch.context_lens[:-1]) + (
                batch.context_lens[-1] + i * batch.new_tokens[-1],)
            engine.complete(again)
        claims += k > 1
        longest = max(longest, k)
    assert claims > 20 and longest >= 4


@pytest.mark.parametrize("kv,rate,seed", [(6000, 4.0, 1), (40_000, 20.0, 2), (40_000, 2.0, 5)])
def test_chunk_runs_equal_plain_stepping(kv, rate, seed):
    lengths = _lengths(80, seed)
    t = np.cumsum(np.random.default_rng(seed).exponential(1 / rate, len(lengths)))
    reqs = [RequestSpec(i, float(t[i]), p, o) for i, (p, o) in enumerate(lengths)]
    plain = simulate(reqs, build("sarathi", 256, 32, kv, MAX_LEN), ContextTimer(), fast_forward=False)
    fast = simulate(reqs, build("sarathi", 256, 32, kv, MAX_LEN), ContextTimer(), fast_forward=True)
    limited = simulate(reqs, build("sarathi", 256, 32, kv, MAX_LEN), ContextTimer(), time_limit_s=float(t[40]))
    stepped = simulate(reqs, build("sarathi", 256, 32, kv, MAX_LEN), ContextTimer(), fast_forward=False,
                       time_limit_s=float(t[40]))
    for pairs in (zip(plain, fast), zip(stepped, limited)):
        for a, b in pairs:
            np.testing.assert_array_equal(a.token_times_s, b.token_times_s)
            np.testing.assert_equal((a.first_scheduled_s, a.finished_s, a.num_preemptions, a.error),
                                    (b.first_scheduled_s, b.finished_s, b.num_preemptions, b.error))  # NaN == NaN


def _step_the_claim(engine, batch, k) -> None:
    """Step k - 1 more iterations: each the same batch a row further, nothing preempted, and the
    prompt's chunk making no token (the run stops before its last chunk)."""
    preemptions = engine.num_preemptions
    for i in range(1, k):
        again = engine.schedule()
        assert again.seqs == batch.seqs and again.new_tokens == batch.new_tokens
        assert again.context_lens == tuple(c + i for c in batch.context_lens[:-1]) + (
            batch.context_lens[-1] + i * batch.new_tokens[-1],)
        assert batch.seqs[-1] not in engine.complete(again).produced
    assert engine.num_preemptions == preemptions


def test_a_prompt_of_whole_chunks_runs_all_but_its_last():
    """A lone 768-token prompt under a 256-token budget: rows of 256, 256, then its last chunk,
    which makes its first token: a run of two."""
    engine = build("sarathi", 256, 32, 40_000, MAX_LEN)
    engine.add(Sequence(0, 768, 5))
    batch = engine.schedule()
    assert engine.chunk_run_limit(batch) == 2
    engine.complete(batch)
    _step_the_claim(engine, batch, 2)
    assert 0 in [s.seq_id for s in engine.complete(engine.schedule()).produced]


def test_a_chunk_run_ends_where_the_free_list_does():
    """Each batch's claim made with all but one block held by another tenant (grown through the
    engine's block manager): the claim stops before the row whose decode slots that one block
    cannot cover, as stepping then would preempt; some claims are cut so."""
    engine = build("sarathi", 128, 32, 40_000, MAX_LEN)
    for i, (p, o) in enumerate(_lengths(60, 7)):
        engine.add(Sequence(i, p, o))
    tenant = Sequence(10_000, 1, 1)
    cut = 0
    while engine.has_unfinished:
        batch = engine.schedule()
        engine.blocks.grow(tenant, (engine.blocks.num_free - 1) * engine.blocks.block_size)
        k = engine.chunk_run_limit(batch)
        if k > 1 and len(batch.seqs) > 1:  # the rows the prompt and the decodes' outputs allow
            prompt, chunk = batch.seqs[-1], batch.new_tokens[-1]
            rows = min((prompt.prefill_target - prompt.num_computed - 1) // chunk,
                       min(s.output_len - s.num_generated for s in batch.seqs[:-1]))
            cut += k < rows
        engine.complete(batch)
        _step_the_claim(engine, batch, k)
        engine.blocks.free(tenant)
    assert cut > 5


@pytest.mark.parametrize("name", ["yi-tp2", "mistral-window", "llama70-tp4pp2-a40", "mixtral-fp8-v1"])
def test_a_chunk_runs_rows_are_priced_as_stepping_prices_them(name):
    """PerfModel.chunk_run_times row i is iteration_time of the batch i rows on, bit for bit."""
    from tests.test_perf_pricer import MODELS
    model = MODELS[name]
    rng = np.random.default_rng(11)
    for _ in range(60):
        d, chunk, k = int(rng.integers(0, 40)), int(rng.integers(2, 600)), int(rng.integers(1, 12))
        ctx = tuple(int(c) for c in rng.integers(1, 6000, d)) + (int(rng.integers(0, 4000)),)
        new = (1,) * d + (chunk,)
        want = [model.iteration_time(new, tuple(c + i for c in ctx[:-1]) + (ctx[-1] + i * chunk,)) for i in range(k)]
        assert model.chunk_run_times(new, ctx, k) == want
    assert model.chunk_run_times((1, 1), (5, 6), 3) is None  # decode-only: not a chunk run's batch
