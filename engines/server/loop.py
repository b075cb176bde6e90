"""The engine loop: the one task that drives the engine core while HTTP handlers come and go.

Handlers `submit` requests and read tokens from their `RequestState`; the loop schedules a
batch, runs it on the executor, completes it in the core and hands each produced token (with its
time) to the request's state. The core and the states are touched only on the event loop's
thread. An executor that blocks (a real model, the real-time twin's sleep) runs on one dedicated
worker thread, so the event loop keeps accepting requests and streaming tokens meanwhile; a
zero-time executor (null) runs inline.

Times are `time.monotonic()` of this process (CLOCK_MONOTONIC, shared by every process on the
host): a token's time is when its iteration completed, a request's first-scheduled time is when
the loop began scheduling the first iteration that processed any of its prompt.
"""
from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor

from engines.core import Engine, PolicyBroken, PrefixCachingBlockManager, Sequence, TokenIds
from engines.executors.base import SamplingParams
from engines.server.errors import ApiError
from engines.server.stats import LoopStats

log = logging.getLogger("engines.server")


class RequestState:
    """One request's progress as its handler sees it; `changed` is set whenever there is news."""

    __slots__ = ("seq", "sampling", "arrival", "first_scheduled", "token_ids", "token_times", "finish_reason",
                 "error", "finished", "changed")

    def __init__(self, seq: Sequence, sampling: SamplingParams, arrival: float) -> None:
        self.seq = seq
        self.sampling = sampling
        self.arrival = arrival
        self.first_scheduled = float("nan")
        self.token_ids: list[int] = []
        self.token_times: list[float] = []
        self.finish_reason: str | None = None  # "length", "stop", "abort"
        self.error: str | None = None
        self.finished = float("nan")
        self.changed = asyncio.Event()

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    def timing(self) -> dict:
        """The server's own timings for this request: the stream's extension field."""
        return {
            "clock": "monotonic",
            "arrival": self.arrival,
            "first_scheduled": None if self.first_scheduled != self.first_scheduled else self.first_scheduled,
            "token_times": self.token_times,
            "finished": None if self.finished != self.finished else self.finished,
            "num_preemptions": self.seq.num_preemptions,
        }


class EngineLoop:
    def __init__(self, engine: Engine, executor, *, eos_token_id: int | None = None, clock=time.monotonic) -> None:
        self.engine = engine
        self.executor = executor
        self.eos_token_id = eos_token_id
        self.clock = clock
        self.stats = LoopStats()
        self._states: dict[int, RequestState] = {}
        self._next_id = 0
        self._wake = asyncio.Event()
        self._in_flight = False
        self._deferred_frees: list[int] = []
        # Requests aborted while their batch executes: the engine frees their KV blocks (and empties
        # their block tables) only once the batch is back, since the executor's thread reads the
        # tables while it runs (the soak found an abort there crash the batch: benchmarks/bench_soak.py).
        self._deferred_aborts: list[int] = []
        self._blocking = bool(getattr(executor, "blocking", True))
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="executor") if self._blocking else None
        self._task: asyncio.Task | None = None
        self._on_idle = getattr(executor, "idle", None)  # the real-time twin restarts its clock chain
        self._should_stop = getattr(executor, "should_stop", None)  # the torch executor knows its EOS ids
        self._caching = isinstance(engine.blocks, PrefixCachingBlockManager)
        self.broken: str | None = None  # why the policy can serve no more (engines/core/checks.py)

    # -- handlers' side ----------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="engine-loop")

    def submit(self, prompt_token_ids: list[int], max_tokens: int, sampling: SamplingParams,
               arrival: float | None = None, prefilled: bool = False) -> RequestState:
        """Queue a request; raises ValueError if the engine refuses it (too long). `prefilled`: its
        prompt's KV was computed elsewhere and its first token made (a decode server's request):
        what it streams are tokens 2..max_tokens. A server whose policy broke refuses it (500)."""
        if self.broken is not None:
            raise ApiError(500, self.broken)
        # With a prefix cache the core hashes the tokens (a prefilled request's first token was made
        # elsewhere and is not known here: it is never cached).
        tokens = TokenIds(prompt_token_ids, self.engine.blocks.block_size) if self._caching and not prefilled else None
        seq = Sequence(self._next_id, len(prompt_token_ids), max_tokens, tokens)
        if prefilled:
            seq.arrive_prefilled()
        self.engine.add(seq)
        self._next_id += 1
        self.executor.add_request(seq.seq_id, prompt_token_ids, sampling)
        state = RequestState(seq, sampling, self.clock() if arrival is None else arrival)
        self._states[seq.seq_id] = state
        self.stats.requests_received += 1
        self._wake.set()
        return state

    def abort(self, state: RequestState) -> None:
        """Stop a request that is not done (its client went away); frees its KV blocks now."""
        if state.done:
            return
        sid = state.seq.seq_id
        if self._in_flight and state.seq.in_flight:
            self._deferred_aborts.append(sid)
        else:
            self.engine.abort(sid)
        self._states.pop(sid, None)
        self._free_executor(sid)
        self.stats.requests_aborted += 1
        self._end(state, "abort")
        self._wake.set()

    @property
    def num_requests(self) -> int:
        return len(self._states)

    def books_balanced(self) -> bool:
        """Do the KV books balance: every block free, cached or held, reference counts matching the
        live sequences' block tables (the block manager's audit; O(blocks))?"""
        try:
            self.engine.blocks.audit([s.block_table for s in self.engine.seqs.values()])
        except AssertionError as e:
            log.error("KV books do not balance: %s", e)
            return False
        return True

    def abort_all(self) -> None:
        for state in list(self._states.values()):
            self.abort(state)

    async def close(self) -> None:
        self.abort_all()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    # -- the loop ----------------------------------------------------------------------------
    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        engine = self.engine
        while True:
            if self._deferred_frees:
                for sid in self._deferred_frees:
                    self.executor.free(sid)
                self._deferred_frees.clear()
            if not engine.has_unfinished:
                await self._idle()
                continue
            t0 = self.clock()
            try:
                batch = engine.schedule()
            except PolicyBroken as e:  # the engine's books can no longer be trusted: serve nothing more
                self._break(str(e))
                return
            if batch is None:  # nothing fits until a request arrives or leaves
                await self._idle()
                continue
            for seq, prefill in zip(batch.seqs, batch.is_prefill):
                state = self._states.get(seq.seq_id)
                if prefill and state is not None and state.first_scheduled != state.first_scheduled:
                    state.first_scheduled = t0
            self._in_flight = True
            try:
                if self._blocking:
                    tokens = await loop.run_in_executor(self._pool, self.executor.execute, batch)
                else:
                    tokens = self.executor.execute(batch)
            except Exception as e:  # a broken executor fails this batch's requests, not the server
                log.exception("executor failed on a batch of %d sequences", len(batch))
                self._in_flight = False
                self._abort_deferred()
                self._fail(batch, f"executor error: {e}")
                continue
            self._in_flight = False
            self._abort_deferred()
            t1 = self.clock()
            self._complete(batch, tokens, t1)
            self.stats.iteration(t1 - t0, batch.num_prefill_tokens, len(batch) - sum(t is None for t in tokens))
            if not self._blocking:
                await asyncio.sleep(0)  # let handlers run between zero-time iterations

    async def _idle(self) -> None:
        if self._on_idle is not None:
            self._on_idle()
        self._wake.clear()
        await self._wake.wait()

    def _complete(self, batch, tokens: list[int | None], t: float) -> None:
        engine = self.engine
        token_of = {seq.seq_id: tok for seq, tok in zip(batch.seqs, tokens)}
        out = engine.complete(batch)
        for seq in out.produced:
            state = self._states.get(seq.seq_id)
            if state is None:
                continue
            tok = token_of[seq.seq_id]
            state.token_ids.append(tok)
            if seq.tokens is not None:
                seq.tokens.append(tok)
            state.token_times.append(t)
            state.changed.set()
            if not seq.is_finished and self._is_eos(seq.seq_id, tok, state):
                engine.stop(seq.seq_id)
                self._retire(state, "stop", t)
        for seq in out.finished:
            state = self._states.get(seq.seq_id)
            if state is not None:
                self._retire(state, "length", t)

    def _is_eos(self, seq_id: int, tok: int, state: RequestState) -> bool:
        if self._should_stop is not None:
            return bool(self._should_stop(seq_id, tok))
        return self.eos_token_id is not None and tok == self.eos_token_id and not state.sampling.ignore_eos

    def _retire(self, state: RequestState, reason: str, t: float) -> None:
        sid = state.seq.seq_id
        self._states.pop(sid, None)
        self.executor.free(sid)
        self.stats.requests_finished += 1
        state.finished = t
        self._end(state, reason)

    def _break(self, message: str) -> None:
        """The policy broke its contract: say so in the log and to every request, now and later."""
        log.error("%s", message)
        self.broken = message
        for state in list(self._states.values()):
            state.error = message
            self.abort(state)

    def _fail(self, batch, message: str) -> None:
        for seq in batch.seqs:
            state = self._states.get(seq.seq_id)
            if state is not None:
                state.error = message
                self.abort(state)

    def _abort_deferred(self) -> None:
        """The engine's part of the aborts that came while the batch executed (complete() then
        skips their sequences, as it skips any aborted one)."""
        for sid in self._deferred_aborts:
            self.engine.abort(sid)
        self._deferred_aborts.clear()

    def _free_executor(self, sid: int) -> None:
        if self._in_flight:  # the executor may be reading this request's state right now
            self._deferred_frees.append(sid)
        else:
            self.executor.free(sid)

    @staticmethod
    def _end(state: RequestState, reason: str) -> None:
        state.finish_reason = reason
        state.changed.set()
