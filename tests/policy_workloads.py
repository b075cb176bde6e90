"""Shared helpers for engine/policy tests: random workloads and an engine driver with invariants."""
from __future__ import annotations

from engines.core import BasePolicy, Batch, Engine, Sequence
import examples.policies.shortest_prompt_first  # noqa: F401  (the example plugin, tested as the built-ins are)
from engines.schedulers import EngineConfig, SchedulerConfig, make_engine, policy_names, policy_spec

# Every registered policy: the built-ins and the example plugin (examples/policies), but those whose
# batch size must fit max_model_len sequences in memory (their own check_kv: the first Sarathi paper's,
# tests/test_decode_maximal.py drives them at sizes that fit); BUILT_IN: the ones a server started in
# another process knows without the example's entry point installed.
ALL_POLICIES = tuple(p for p in policy_names() if policy_spec(p).cls.check_kv is BasePolicy.check_kv)
BUILT_IN = tuple(p for p in ALL_POLICIES if policy_spec(p).cls.__module__.startswith("engines.schedulers."))


def build(policy: str, budget: int, max_seqs: int, kv_tokens: int, max_model_len: int) -> Engine:
    cfg = SchedulerConfig.shared(policy, max_num_seqs=max_seqs, token_budget=budget)
    return make_engine(EngineConfig(cfg, kv_tokens, max_model_len))


def drive(engine: Engine, lengths: list[tuple[int, int]], check=None, max_iters: int = 200_000) -> tuple[list[Batch], dict[int, int]]:
    """Add all requests, step until done; call check(engine, batch) on every batch. Returns batches and tokens per seq."""
    seqs = [Sequence(i, p, o) for i, (p, o) in enumerate(lengths)]
    for s in seqs:
        engine.add(s)
    batches = []
    produced = {s.seq_id: 0 for s in seqs}
    while engine.has_unfinished:
        running_before = [s for s in engine.running]
        batch = engine.schedule()
        assert batch is not None, "engine stalled with unfinished requests"
        if check is not None:
            check(engine, batch, running_before)
        out = engine.complete(batch)
        for s in out.produced:
            produced[s.seq_id] += 1
        batches.append(batch)
        assert len(batches) < max_iters
    return batches, produced
