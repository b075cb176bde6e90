"""The soak of the in-repo server's new paths, short (benchmarks/bench_soak.py runs it for minutes):
the torch executor on tiny-llama, prefix caching, conversation and agent sessions, cut streams,
preemption, two policies; every check but RSS (which needs a minute after warm-up) must pass. And
the race the soak found, pinned by a test of its own."""
from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="the soak serves with the torch executor")

from benchmarks.bench_soak import SoakSettings, report, soak_policy  # noqa: E402
from engines.schedulers import EngineConfig, SchedulerConfig, make_engine  # noqa: E402

MAX_LEN = 512


@pytest.mark.live
@pytest.mark.parametrize("policy", ["sarathi", "vllm"])
def test_a_short_soak_passes_its_checks(policy):
    s = SoakSettings(seconds_per_policy=5, policies=(policy,), workers=8, kv_tokens=1024, replay=20)  # 64 blocks: preempts
    p = soak_policy(s, policy)
    verdicts = {name: v for name, v, _ in p.checks}
    assert p.ok, report(p, s.seconds_per_policy)
    assert set(verdicts) == {"kv books", "rss flat", "no 5xx", "same tokens", "metrics", "exercised"}


def test_an_abort_while_its_batch_executes_leaves_the_block_table_to_the_executor():
    """The server's executor runs a batch on its own thread while the event loop takes a client's
    disconnect: the engine frees the request's KV (and empties its block table) only once the batch
    is back. The soak (benchmarks/bench_soak.py) found the table emptied under a running torch
    batch: 'executor error: tuple index out of range' failed every request of that batch."""
    import asyncio
    import threading

    from engines.executors.base import SamplingParams
    from engines.executors.null import NullExecutor
    from engines.server.loop import EngineLoop

    class Gated(NullExecutor):
        blocking = True  # on the loop's worker thread, as the torch executor runs

        def __init__(self) -> None:
            super().__init__()
            self.running, self.go, self.tables = threading.Event(), threading.Event(), []

        def execute(self, batch):
            self.running.set()
            self.go.wait(10)
            self.tables.append([len(s.block_table) for s in batch.seqs])  # what a model runner reads now
            return super().execute(batch)

    async def serve():
        ex = Gated()
        loop = EngineLoop(make_engine(EngineConfig(SchedulerConfig("sarathi"), 64 * MAX_LEN, MAX_LEN)), ex)
        loop.start()
        state = loop.submit(list(range(100)), 4, SamplingParams())
        await asyncio.get_running_loop().run_in_executor(None, ex.running.wait, 10)
        loop.abort(state)  # the client went away mid-batch
        ex.go.set()
        while loop.engine.blocks.num_free < loop.engine.blocks.num_blocks:
            await asyncio.sleep(0.01)
        await loop.close()
        return ex.tables, loop.books_balanced()

    tables, balanced = asyncio.run(serve())
    assert tables == [[7]] and balanced  # 100 prompt tokens: 7 blocks, intact while it ran; all freed after
