"""The engine's decode pass vouches for the decodes it returns (engines/core/decode_pass.py): the
check of a batch that starts with exactly them (one token each, no sequence released since) checks
only the rest. A policy that breaks the contract around the pass is still refused: it releases one
of the vouched decodes and schedules it anyway, repeats one of them, swaps one for a finished
sequence, or gives one two tokens."""
from __future__ import annotations

import pytest

from engines.core import Batch, PolicyBroken
from engines.schedulers import EngineConfig, SchedulerConfig, make_engine, register_policy, registry
from engines.schedulers.sarathi import SarathiPolicy
from tests.policy_workloads import drive

MAX_LEN = 512


class PreemptsItsDecode(SarathiPolicy):
    """After the decode pass, preempts its newest decode and still schedules it (a waiting sequence)."""

    def schedule(self, engine):
        batch = super().schedule(engine)
        decodes = [s for s, p in zip(batch.seqs, batch.is_prefill) if not p] if batch else []
        if len(decodes) >= 2:
            engine.preempt(decodes[-1])
        return batch


class RepeatsADecode(SarathiPolicy):
    """Sarathi's batch with its first decode scheduled a second time at the end."""

    def schedule(self, engine):
        batch = super().schedule(engine)
        if batch is not None and not batch.is_prefill[0]:
            return Batch.build([*zip(batch.seqs, batch.new_tokens), (batch.seqs[0], 1)])
        return batch


class SwapsInAFinished(SarathiPolicy):
    """Runs the decode pass, then schedules its decodes with the first one swapped for a sequence
    that finished earlier: as many sequences as the pass vouched for, one token each."""

    def __init__(self, token_budget: int = 256, max_num_seqs: int = 16) -> None:
        super().__init__(token_budget, max_num_seqs)
        self.seen: list = []

    def schedule(self, engine):
        done = next((s for s in self.seen if s.is_finished), None)
        if done is not None and any(not s.is_prefill for s in engine.running):
            decodes, _, _ = engine.decode_pass()
            if decodes:
                return Batch.build([(done, 1)] + [(s, 1) for s in decodes[1:]])
        batch = super().schedule(engine)
        if batch is not None:
            self.seen += batch.seqs
        return batch


class TwoTokenDecode(SarathiPolicy):
    """Sarathi's batch with its first decode given two tokens."""

    def schedule(self, engine):
        batch = super().schedule(engine)
        if batch is not None and not batch.is_prefill[0]:
            return Batch.build([(batch.seqs[0], 2), *zip(batch.seqs[1:], batch.new_tokens[1:])])
        return batch


BROKEN = {"preempts_its_decode": (PreemptsItsDecode, "is scheduled but waiting"),
          "repeats_a_decode": (RepeatsADecode, "is in the batch twice"),
          "swaps_in_a_finished": (SwapsInAFinished, "is scheduled but finished"),
          "two_token_decode": (TwoTokenDecode, "scheduled for 2 tokens, not 1")}


@pytest.fixture
def plugins(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    for name, (cls, _) in BROKEN.items():
        register_policy(name)(cls)


@pytest.mark.parametrize("name", BROKEN)
def test_a_policy_breaking_the_contract_around_the_decode_pass_is_refused(plugins, name):
    engine = make_engine(EngineConfig(SchedulerConfig(name, token_budget=256, max_num_seqs=16), 64 * MAX_LEN, MAX_LEN))
    with pytest.raises(PolicyBroken) as e:
        drive(engine, [(300, 20)] * 40)
    assert BROKEN[name][1] in str(e.value)


def test_the_vouched_decodes_are_in_flight_and_the_rest_checked():
    """Sarathi's batches pass with the vouch (no false alarm), each decode the pass returned in
    flight once scheduled, as the full check would leave it."""
    engine = make_engine(EngineConfig(SchedulerConfig("sarathi", token_budget=256, max_num_seqs=16), 64 * MAX_LEN, MAX_LEN))

    def check(engine, batch, _):
        vouched, releases = engine.vouch
        assert batch.seqs[:len(vouched)] == vouched and releases == engine.releases
        assert all(s.in_flight for s in batch.seqs)

    _, produced = drive(engine, [(300, 20)] * 40, check)
    assert produced == {i: 20 for i in range(40)}
