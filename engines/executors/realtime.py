"""The performance model in real time: the "GPU-less twin" of a serving deployment.

execute() sleeps for the iteration time the analytical model (engines.perf) predicts for the
batch and returns made-up token ids, so a server built on it behaves, at real timescales, like
the simulated deployment: an HTTP client sees the latencies the simulator would compute.

Deadlines are absolute. While the engine is busy, iteration k+1 starts at iteration k's
deadline, not at the moment the engine loop got around to it: the loop's own overhead
(scheduling, streaming tokens to clients, a thread hand-off, a preempted CPU) is absorbed into
the predicted time instead of being added to every iteration, which would make the twin drift
slower than the model and, near saturation, inflate queueing delays many times over. Lateness
up to one iteration (`catch_up_s`, default: the iteration's own predicted time, at least 2 ms) is
absorbed by shortening the next iteration; beyond that the chain restarts at the current time
rather than bursting through a backlog of zero-length iterations. The engine loop calls `idle()`
when it runs out of work, so that a chain never bridges an idle period (an iteration never starts
before the request it serves arrived).

`time_scale` stretches every predicted time (e.g. 10x on a slow CPU host, so that Python's
per-iteration overhead is small next to the iterations it emulates); a simulation compared
against such a server must use the same factor.
"""
from __future__ import annotations

import time

import numpy as np

from engines.core import Batch
from engines.executors.base import SamplingParams
from engines.executors.null import MadeUpTokens


class RealTimeExecutor:
    # execute() sleeps: the engine loop runs it on a worker thread so the event loop stays free.
    blocking = True

    def __init__(
        self,
        timer,  # has batch_times(new_tokens, context_lens) -> seconds, e.g. engines.perf.PerfModel
        vocab_size: int,
        *,
        time_scale: float = 1.0,
        catch_up_s: float | None = None,
        seed: int = 0,
        clock=time.monotonic,
        sleep=time.sleep,
    ) -> None:
        if not time_scale > 0:
            raise ValueError(f"time_scale must be > 0, got {time_scale}")
        self._timer = timer
        self._scale = float(time_scale)
        self._catch_up = catch_up_s
        self._clock = clock
        self._sleep = sleep
        self._tokens = MadeUpTokens(vocab_size, seed)
        self._deadline = -np.inf  # end of the previous iteration
        self.last_start = float("nan")  # start of the latest iteration, on `clock`
        self.last_predicted_s = 0.0
        # Self-checks, exported on /metrics: how faithful the twin's clock has been.
        self.predicted_s_total = 0.0
        self.overrun_s_total = 0.0  # time past a deadline when its sleep returned
        self.chain_restarts = 0  # busy iterations that began more than catch_up_s after the previous deadline
        self._last_overrun = 0.0
        self.late_start_s_total = 0.0  # the time those iterations began past the previous deadline: lost, not absorbed

    def add_request(self, seq_id: int, prompt_token_ids: list[int] | None, sampling: SamplingParams) -> None:
        self._tokens.add(seq_id)

    def predict(self, batch: Batch) -> float:
        t = self._timer.batch_times(np.asarray(batch.new_tokens), np.asarray(batch.context_lens))
        return float(t) * self._scale

    def execute(self, batch: Batch) -> list[int | None]:
        dt = self.predict(batch)
        now = self._clock()
        catch_up = max(dt, 0.002) if self._catch_up is None else self._catch_up
        if now - self._deadline <= catch_up:
            start = self._deadline
        else:
            start = now
            if self._deadline != -np.inf:  # busy, yet later than one iteration: the host held the loop back
                self.chain_restarts += 1
                # What the previous sleep's overrun already counted is not counted twice.
                self.late_start_s_total += max(0.0, now - self._deadline - self._last_overrun)
        self._deadline = start + dt
        self.last_start = start
        self.last_predicted_s = dt
        tokens = self._tokens.sample(batch)
        remaining = self._deadline - self._clock()
        if remaining > 0:
            self._sleep(remaining)
        self.predicted_s_total += dt
        self._last_overrun = max(0.0, self._clock() - self._deadline)
        self.overrun_s_total += self._last_overrun
        return tokens

    def metrics(self) -> dict[str, float]:
        return {
            "twin_predicted_seconds_total": self.predicted_s_total,
            "twin_overrun_seconds_total": self.overrun_s_total,
            "twin_chain_restarts_total": self.chain_restarts,
            "twin_late_start_seconds_total": self.late_start_s_total,
        }

    def idle(self) -> None:
        """The engine ran out of work: the next iteration starts when it is asked for."""
        self._deadline = -np.inf

    def free(self, seq_id: int) -> None:
        self._tokens.free(seq_id)
