"""The engine checks a policy's batch against its invariants before it runs (engines/core/checks.py):
a plugin that raises in `schedule`, returns a batch over its token budget, or schedules a finished
sequence fails the run loudly, naming the policy (exit 3, only a marked partial directory), never
a traceback or a silently wrong number. The plugins are defined here, registered as
examples/policies/ registers its own."""
from __future__ import annotations

import pytest

from engines.core import BasePolicy, Batch, PolicyBroken
from engines.schedulers import EngineConfig, SchedulerConfig, make_engine, register_policy, registry
from engines.schedulers.sarathi import SarathiPolicy
from harness.commands.main import main
from tests.policy_workloads import drive

MAX_LEN = 512


class RaisingSarathi(SarathiPolicy):
    """Sarathi's batches, then a bug on its 20th call."""

    def __init__(self, token_budget: int = 256, max_num_seqs: int = 16) -> None:
        super().__init__(token_budget, max_num_seqs)
        self.calls = 0

    def schedule(self, engine):
        self.calls += 1
        if self.calls == 20:
            raise ZeroDivisionError("a plugin's bug")
        return super().schedule(engine)


class OverBudgetSarathi(SarathiPolicy):
    """Declares a budget of 256 tokens (max_batch_tokens) but chunks by twice that."""

    def __init__(self, token_budget: int = 256, max_num_seqs: int = 16) -> None:
        super().__init__(token_budget, max_num_seqs)
        self.token_budget = 2 * token_budget


class FinishedAgainSarathi(SarathiPolicy):
    """Remembers what it scheduled and puts a finished sequence back into a batch."""

    def __init__(self, token_budget: int = 256, max_num_seqs: int = 16) -> None:
        super().__init__(token_budget, max_num_seqs)
        self.seen: list = []

    def schedule(self, engine):
        batch = super().schedule(engine)
        if batch is not None:
            self.seen += batch.seqs
            done = next((s for s in self.seen if s.is_finished), None)
            if done is not None:
                return Batch.build([*zip(batch.seqs, batch.new_tokens), (done, 1)])
        return batch


class UngrownDecodes(BasePolicy):
    """Admits FCFS and runs each prompt whole, then decodes without growing the KV it holds: the
    first decode past the prompt's last block computes a token no block of it can hold."""

    def __init__(self, max_num_seqs: int = 16) -> None:
        self.max_num_seqs = max_num_seqs

    def schedule(self, engine):
        items = [(s, s.remaining_prefill if s.is_prefill else 1) for s in engine.running if not s.in_flight]
        while engine.waiting and len(engine.running) < self.max_num_seqs and engine.blocks.can_admit(engine.waiting[0]):
            seq = engine.admit_next()
            items.append((seq, seq.remaining_prefill))
        return Batch.build(items) if items else None


class DecodesUncountedSarathi(SarathiPolicy):
    """Declares a budget of 256 tokens and keeps it in a batch of prefills alone, but fills a batch
    holding decodes with prefill chunks as if the decodes took none of it (a mixed batch over it)."""

    def __init__(self, token_budget: int = 256, max_num_seqs: int = 16) -> None:
        super().__init__(token_budget, max_num_seqs)

    def schedule(self, engine):
        decoding = sum(1 for s in engine.running if not s.is_prefill and not s.in_flight)
        self.token_budget = self.max_batch_tokens + decoding
        return super().schedule(engine)


PLUGINS = {"raising_sarathi": (RaisingSarathi, "schedule raised ZeroDivisionError: a plugin's bug"),
           "over_budget_sarathi": (OverBudgetSarathi, "tokens with a prefill, over its max_batch_tokens 256"),
           "finished_again_sarathi": (FinishedAgainSarathi, "is scheduled but finished")}


@pytest.fixture
def plugins(monkeypatch):
    """The plugins registered for one test (the registry as it was afterwards)."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    for name, (cls, _) in PLUGINS.items():
        register_policy(name)(cls)
    register_policy("ungrown_decodes")(UngrownDecodes)
    register_policy("decodes_uncounted_sarathi")(DecodesUncountedSarathi)


@pytest.mark.parametrize("name", PLUGINS)
def test_the_engine_refuses_a_broken_batch_naming_the_policy(plugins, name):
    engine = make_engine(EngineConfig(SchedulerConfig(name), 64 * MAX_LEN, MAX_LEN))
    with pytest.raises(PolicyBroken) as e:
        drive(engine, [(300, 20)] * 40)
    assert str(e.value).startswith(f"scheduling policy {name} broke its contract: ")
    assert PLUGINS[name][1] in str(e.value)


def test_the_built_in_policies_keep_their_own_contract():
    """Every batch of the sarathi policy passes the check where the plugin's did not (the check
    itself holds no false alarm for the same workload)."""
    _, produced = drive(make_engine(EngineConfig(SchedulerConfig("sarathi", token_budget=256, max_num_seqs=16), 64 * MAX_LEN,
                                    MAX_LEN)), [(300, 20)] * 40)
    assert produced == {i: 20 for i in range(40)}


@pytest.mark.parametrize("name", PLUGINS)
def test_a_run_with_a_broken_plugin_fails_loudly(plugins, name, tmp_path, capsys):
    code = main(["experiment=mistral7b_strict", f"scheduler=[sarathi,{name}]", "search.num_requests=48",
                 "search.fixed_qps=4", "progress=false", f"results_dir={tmp_path}"])
    err = capsys.readouterr().err
    assert code == 3, err[-3000:]
    assert f"the run broke, nothing it measured is a result: scheduling policy {name} broke its contract" in err
    assert "Traceback" not in err
    runs = list((tmp_path / "mistral7b_strict").iterdir())
    assert not [d for d in runs if not d.name.startswith(".")]  # nothing that reads as a finished run
    (partial,) = [d for d in runs if d.name.endswith(".partial")]
    assert PLUGINS[name][1] in (partial / "FAILED.txt").read_text()


def test_a_server_whose_policy_broke_fails_its_requests_and_refuses_more(plugins):
    """The in-repo server's loop: every request gets the error naming the policy (a 500 to its
    client), a later one is refused with it, and the loop drives the engine no more."""
    import asyncio

    from engines.executors.base import SamplingParams
    from engines.executors.null import NullExecutor
    from engines.server.errors import ApiError
    from engines.server.loop import EngineLoop

    async def serve() -> tuple[list[str | None], ApiError]:
        loop = EngineLoop(make_engine(EngineConfig(SchedulerConfig("over_budget_sarathi"), 64 * MAX_LEN, MAX_LEN)), NullExecutor())
        loop.start()
        states = [loop.submit(list(range(300)), 20, SamplingParams()) for _ in range(8)]
        await asyncio.wait_for(asyncio.gather(*(s.changed.wait() for s in states)), 10)
        with pytest.raises(ApiError) as refused:
            loop.submit(list(range(10)), 2, SamplingParams())
        await loop.close()
        return [s.error for s in states], refused.value

    errors, refused = asyncio.run(serve())
    assert all(e is not None and "scheduling policy over_budget_sarathi broke its contract" in e for e in errors)
    assert refused.status == 500 and "over_budget_sarathi" in refused.message



def test_a_batch_computing_past_the_kv_blocks_it_holds_is_refused_before_it_runs(plugins):
    """Context plus the tokens computed now: a 304-token prompt holds 19 blocks of 16 (304 slots);
    its first decode computes token 304, a 305th slot no block holds, and that batch is the one
    refused (its own context, 304, is still within the blocks)."""
    engine = make_engine(EngineConfig(SchedulerConfig("ungrown_decodes"), 64 * MAX_LEN, MAX_LEN))
    with pytest.raises(PolicyBroken) as e:
        drive(engine, [(304, 2)] * 4)
    assert "computes tokens 304..304 but holds KV blocks for 304" in str(e.value)


def test_a_mixed_batch_over_max_batch_tokens_is_refused(plugins):
    """A prefill chunk with decodes counts the decodes too: the plugin's batches of prefills alone
    keep its 256 tokens, its first batch with decodes (256 chunk tokens + the decodes) is refused."""
    engine = make_engine(EngineConfig(SchedulerConfig("decodes_uncounted_sarathi"), 64 * MAX_LEN, MAX_LEN))
    seen = []
    with pytest.raises(PolicyBroken) as e:
        drive(engine, [(300, 20)] * 40, check=lambda _, batch, __: seen.append(batch))
    assert "tokens with a prefill, over its max_batch_tokens 256" in str(e.value)
    assert seen and all(b.num_decodes == 0 and b.num_tokens <= 256 for b in seen)  # every batch before it: prefills alone
