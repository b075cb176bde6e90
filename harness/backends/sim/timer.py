"""What the simulator asks of an iteration timer, and an adapter for timers that offer less.

The performance model (engines.perf.PerfModel) prices one batch given as tuples of ints in a few
microseconds and a run of decode-only iterations from its first contexts, bit-identical to its
vectorized `batch_times` / `stage_times` (engines/perf/batch_pricer.py). A timer that has only the
two array methods (a test's stand-in, a wrapper that counts calls) is put behind the same interface
by `fast_timer`, pricing through the array methods as the loops did before.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np


class IterationTimer(Protocol):
    def batch_times(self, new_tokens: np.ndarray, context_lens: np.ndarray) -> np.ndarray:
        """Seconds of one iteration per batch row (used without pipeline parallelism)."""
        ...

    def stage_times(self, new_tokens: np.ndarray, context_lens: np.ndarray) -> np.ndarray:
        """Seconds of each pipeline stage, shape (..., pp) (used with pipeline parallelism)."""
        ...

    def pp_send_time(self, num_tokens: int) -> float:
        """Seconds to send a micro-batch's activations to the next pipeline stage."""
        ...


class FastTimer(IterationTimer, Protocol):
    def iteration_time(self, new_tokens: Sequence[int], context_lens: Sequence[int]) -> float:
        """batch_times of one batch given as sequences of ints."""
        ...

    def iteration_stage_times(self, new_tokens: Sequence[int], context_lens: Sequence[int]) -> list[float]:
        """stage_times of one batch given as sequences of ints."""
        ...

    def decode_run_times(self, base: Sequence[int], lo: int, hi: int) -> list[float]:
        """batch_times of decode-only iterations lo..hi-1 (iteration i: contexts base + i), hi - lo floats."""
        ...

    def decode_run_stage_times(self, base: np.ndarray, lo: int, hi: int) -> np.ndarray:
        """(hi - lo, pp) stage_times of the same iterations."""
        ...

    # Optional (stepping._decode_run reads it with getattr: a timer without it keeps its fast path):
    # decode_time_floor(batch_size) -> float | None, a lower bound of iteration_time for
    # decode-only batches of this size, where the timer prices decode runs row for row as
    # iteration_time prices one batch (so a run's first row is its first iteration's time).
    # alone_decode_times(top) -> list[float] | None, per context c (0..top at least) the
    # decode_run_times row of one sequence at c: a lone sequence's run is a slice of it.
    # chunk_run_times(new_tokens, context_lens, k) -> list[float] | None, iteration_time of each
    # row of a chunk run (stepping._chunk_run): row i the batch's decodes i contexts on, its chunk i
    # chunks on; None: priced row by row with iteration_time.


_FAST = ("iteration_time", "iteration_stage_times", "decode_run_times", "decode_run_stage_times")


def fast_timer(timer: IterationTimer) -> FastTimer:
    """`timer` itself if it prices batches the fast way, else an adapter over its array methods."""
    if all(hasattr(timer, name) for name in _FAST):
        return timer  # type: ignore[return-value]
    return _ArrayTimer(timer)


class _ArrayTimer:
    """Without the optional prices (the loops price row by row): its 2-D rows are not promised to
    be its 1-D batches' doubles (no decode_time_floor), nor is there a per-context table."""

    def __init__(self, timer: IterationTimer) -> None:
        self.timer = timer

    def batch_times(self, new_tokens, context_lens):
        return self.timer.batch_times(new_tokens, context_lens)

    def stage_times(self, new_tokens, context_lens):
        return self.timer.stage_times(new_tokens, context_lens)

    def pp_send_time(self, num_tokens):
        return self.timer.pp_send_time(num_tokens)

    def iteration_time(self, new_tokens, context_lens) -> float:
        return float(self.timer.batch_times(np.asarray(new_tokens), np.asarray(context_lens)))

    def iteration_stage_times(self, new_tokens, context_lens) -> list[float]:
        return self.timer.stage_times(np.asarray(new_tokens), np.asarray(context_lens)).tolist()

    def decode_run_times(self, base, lo, hi):
        ctx = _run_contexts(base, lo, hi)
        return self.timer.batch_times(np.ones_like(ctx), ctx).tolist()

    def decode_run_stage_times(self, base, lo, hi):
        ctx = _run_contexts(base, lo, hi)
        return self.timer.stage_times(np.ones_like(ctx), ctx)


def _run_contexts(base, lo: int, hi: int) -> np.ndarray:
    return np.asarray(base, dtype=np.int64)[None, :] + np.arange(lo, hi, dtype=np.int64)[:, None]


class OffloadPriced:
    """`timer`, plus the price of the host KV tier's transfers (`kv_tier_time(loads, stores)`,
    engines/perf/offload.py): what `stepping.step_until` adds to an iteration of an engine with a tier."""

    def __init__(self, timer: IterationTimer, offload) -> None:
        self._timer = fast_timer(timer)
        self.offload = offload

    def __getattr__(self, name: str):
        return getattr(self._timer, name)

    def kv_tier_time(self, loads: int, stores: int) -> float:
        return self.offload.seconds(loads, stores)
