"""Driving an engine and an executor to completion without a server: schedule -> execute ->
complete, with up to `executor.pipeline_depth` micro-batches in flight, EOS handled the way the
server handles it (Engine.stop after complete). Used by tests, benchmarks, the profiler and the
GPU check. Works with any executor that has add_request / submit-or-execute / free."""
from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from engines.core import Engine, PrefixCachingBlockManager, TokenIds
from engines.core import Sequence as CoreSequence
from engines.executors.base import SamplingParams


@dataclass(frozen=True)
class OfflineRequest:
    seq_id: int
    prompt_token_ids: tuple[int, ...] | None
    output_len: int
    prompt_len: int | None = None  # needed when prompt_token_ids is None
    sampling: SamplingParams = SamplingParams()
    arrival_s: float = 0.0  # offset from the start of the run (used by run_realtime)


@dataclass
class RunStats:
    iterations: int = 0
    tokens_computed: int = 0  # prompt + decode tokens through the model
    outputs: dict[int, list[int]] = field(default_factory=dict)
    # Per request: arrival, first scheduled, token times (seconds from the start), preemptions.
    arrival_s: dict[int, float] = field(default_factory=dict)
    first_scheduled_s: dict[int, float] = field(default_factory=dict)
    token_times_s: dict[int, list[float]] = field(default_factory=dict)
    num_preemptions: dict[int, int] = field(default_factory=dict)
    wall_s: float = 0.0
    unfinished: list[int] = field(default_factory=list)  # stopped by a time limit


def _submit(executor, batch):
    submit = getattr(executor, "submit", None)
    if submit is not None:
        return submit(batch)

    class _Done:
        def __init__(self, tokens):
            self.tokens = tokens

        def result(self):
            return self.tokens

    return _Done(executor.execute(batch))


def run_realtime(engine: Engine, executor, requests: Sequence[OfflineRequest],
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep,
                 time_limit_s: float | None = None) -> RunStats:
    """Serve `requests` as they arrive (arrival_s after the start, on `clock`), recording real
    token times. With all arrivals at 0 this is an offline batch run. With `time_limit_s`, no
    iteration starts after the limit (those in flight finish); unfinished requests keep the
    tokens they made and `stats.unfinished` lists them (their KV blocks are freed)."""
    pending = deque(sorted(requests, key=lambda r: (r.arrival_s, r.seq_id)))
    stats = RunStats()
    depth = max(1, getattr(executor, "pipeline_depth", 1))
    in_flight: deque = deque()
    start = clock()
    caching = isinstance(engine.blocks, PrefixCachingBlockManager)  # then the core hashes the tokens, as the server's

    def now() -> float:
        return clock() - start

    def admit(t: float) -> None:
        while pending and pending[0].arrival_s <= t:
            r = pending.popleft()
            prompt_len = len(r.prompt_token_ids) if r.prompt_token_ids is not None else r.prompt_len
            tokens = TokenIds(r.prompt_token_ids, engine.blocks.block_size) if caching and r.prompt_token_ids else None
            seq = CoreSequence(r.seq_id, prompt_len, r.output_len, tokens)
            executor.add_request(r.seq_id, list(r.prompt_token_ids) if r.prompt_token_ids else None, r.sampling)
            engine.add(seq)
            stats.outputs[r.seq_id] = []
            stats.token_times_s[r.seq_id] = []
            stats.arrival_s[r.seq_id] = r.arrival_s

    limit = float("inf") if time_limit_s is None else time_limit_s
    while pending or engine.has_unfinished or in_flight:
        if now() > limit:
            if not in_flight:
                break
        else:
            admit(now())
        while len(in_flight) < depth and now() <= limit:
            batch = engine.schedule()
            if batch is None:
                break
            t = now()
            for s in batch.seqs:
                stats.first_scheduled_s.setdefault(s.seq_id, t)
            in_flight.append((batch, _submit(executor, batch)))
        if not in_flight:
            if now() > limit:
                break
            if pending:
                sleep(max(0.0, min(pending[0].arrival_s, limit) - now()))
                continue
            if engine.has_unfinished:
                raise RuntimeError(f"engine stalled: {len(engine.waiting)} waiting, {len(engine.running)} running")
            break
        batch, handle = in_flight.popleft()
        tokens = handle.result()
        t = now()
        stats.iterations += 1
        stats.tokens_computed += batch.num_tokens
        out = engine.complete(batch)
        stops = []
        position = {s.seq_id: i for i, s in enumerate(batch.seqs)}
        for seq in out.produced:
            tok = tokens[position[seq.seq_id]]
            stats.outputs[seq.seq_id].append(tok)
            if seq.tokens is not None:
                seq.tokens.append(tok)
            stats.token_times_s[seq.seq_id].append(t)
            if seq not in out.finished and getattr(executor, "should_stop", lambda *_: False)(seq.seq_id, tok):
                stops.append(seq.seq_id)
        for sid in stops:
            engine.stop(sid)
        for seq in batch.seqs:
            if seq.is_finished:
                stats.num_preemptions[seq.seq_id] = seq.num_preemptions
                executor.free(seq.seq_id)
    stats.wall_s = now()
    stats.unfinished = sorted(s.seq_id for s in list(engine.waiting) + list(engine.running))
    for sid in stats.unfinished:
        engine.abort(sid)
        executor.free(sid)
    stats.unfinished += [r.seq_id for r in pending]
    return stats


def run_to_completion(engine: Engine, executor, requests: Sequence[OfflineRequest]) -> RunStats:
    """All requests at once (an offline batch)."""
    return run_realtime(engine, executor, [OfflineRequest(r.seq_id, r.prompt_token_ids, r.output_len, r.prompt_len,
                                                          r.sampling, 0.0) for r in requests])
