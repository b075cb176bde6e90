"""The contract between the engine loop (a server or a script) and whatever computes a batch.

The engine core knows lengths, not tokens; an executor keeps each request's token ids (prompt and
sampled) keyed by the core's `seq_id`, so preemption by recompute just re-reads them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from engines.core import Batch


@dataclass(frozen=True, slots=True)
class SamplingParams:
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0
    seed: int | None = None
    ignore_eos: bool = True  # benchmarks generate exactly max_tokens


class Executor(Protocol):
    def add_request(self, seq_id: int, prompt_token_ids: list[int] | None, sampling: SamplingParams) -> None:
        """Register a request before the core first schedules it (None: the executor makes ids up)."""
        ...

    def execute(self, batch: Batch) -> list[int | None]:
        """Compute one iteration; blocking. One entry per batch item: the sampled token id, or None
        for a prefill chunk that is not its prompt's last (it samples nothing)."""
        ...

    def free(self, seq_id: int) -> None:
        """Forget a finished or aborted request."""
        ...
