"""What one iteration asks of the model ranks, in plain Python (picklable, no tensors): the
driver builds it from the engine core's Batch and its own token lists, and sends it to every
rank; each rank turns it into tensors on its own device."""
from __future__ import annotations

from dataclasses import dataclass

from engines.executors.base import SamplingParams


@dataclass(frozen=True, slots=True)
class StepItem:
    seq_id: int
    token_ids: tuple[int, ...]  # the tokens this iteration computes (a prefill chunk, or the newest token)
    context_len: int  # tokens of this sequence already in the KV cache
    block_table: tuple[int, ...]  # KV blocks covering at least context_len + len(token_ids) tokens
    sample: bool  # last chunk of a prefill, or a decode: sample the next token
    sampling: SamplingParams

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)


@dataclass(frozen=True, slots=True)
class StepPlan:
    step_id: int
    items: tuple[StepItem, ...]

    @property
    def num_tokens(self) -> int:
        return sum(len(i.token_ids) for i in self.items)
