"""One request inside the engine: how far its prompt has been computed, how many tokens it made.

Token accounting (ARCHITECTURE.md): the iteration holding a request's last prefill chunk produces
its first output token; every later decode iteration feeds back the newest token and produces the
next one. Preemption by recompute discards the KV cache and re-prefills prompt + generated tokens,
which produces the next token directly (as vLLM does).
"""
from __future__ import annotations

from enum import Enum

from engines.compiled import mypyc_attr


class SequenceStatus(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"
    ABORTED = "aborted"


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)  # (engines/compiled.py)
class Sequence:
    __slots__ = (
        "seq_id",
        "prompt_len",
        "output_len",
        "status",
        "num_computed",
        "num_generated",
        "prefill_target",
        "block_table",
        "num_preemptions",
        "in_flight",
        "tokens",
        "blocks_hashed",
        "blocks_unregistered",
        "cached_tokens",
    )

    def __init__(self, seq_id: int, prompt_len: int, output_len: int, tokens=None) -> None:
        if prompt_len < 1 or output_len < 1:
            raise ValueError(f"sequence {seq_id}: prompt_len and output_len must be >= 1, got {prompt_len}, {output_len}")
        self.seq_id = seq_id
        self.prompt_len = prompt_len
        self.output_len = output_len
        self.status = SequenceStatus.WAITING
        self.num_computed = 0  # tokens whose KV is in the cache
        self.num_generated = 0  # output tokens produced so far, the first included
        self.prefill_target = prompt_len  # tokens the current prefill must compute
        self.block_table: list[int] = []
        self.num_preemptions = 0
        self.in_flight = False  # inside a batch that is executing (pipeline parallelism)
        # Prefix caching (engines/core/prefix_cache.py): what the tokens are (tokens.TokenIds or
        # tokens.Segments; None: unknown, never cached), how many of its blocks the cache has seen
        # (and of those, how many it left uncached: their hash was another block's), and the prompt
        # tokens its first admission found cached.
        self.tokens = tokens
        self.blocks_hashed = 0
        self.blocks_unregistered = 0
        self.cached_tokens = 0

    @property
    def is_prefill(self) -> bool:
        return self.num_computed < self.prefill_target

    @property
    def remaining_prefill(self) -> int:
        return self.prefill_target - self.num_computed

    @property
    def remaining_output(self) -> int:
        return self.output_len - self.num_generated

    @property
    def max_len(self) -> int:
        """Tokens the sequence holds in KV at most (the last token is never fed back)."""
        return self.prompt_len + self.output_len - 1

    @property
    def is_finished(self) -> bool:
        return self.status in (SequenceStatus.FINISHED, SequenceStatus.ABORTED)

    def arrive_prefilled(self) -> None:
        """Its prompt was prefilled elsewhere and the KV moved here (a decode instance of a
        disaggregated cluster): the prompt's KV is computed and the first token already made, so
        the next iteration that runs it is a decode producing token 2."""
        if self.status is not SequenceStatus.WAITING or self.num_computed or self.output_len < 2:
            raise ValueError(f"{self}: only a new request with output_len >= 2 can arrive prefilled")
        self.num_computed = self.prompt_len
        self.num_generated = 1

    def reset_for_recompute(self) -> None:
        self.num_computed = 0
        self.prefill_target = self.prompt_len + self.num_generated
        self.num_preemptions += 1
        self.status = SequenceStatus.WAITING

    def __repr__(self) -> str:
        return (
            f"Sequence(id={self.seq_id}, {self.status.value}, computed={self.num_computed}/"
            f"{self.prefill_target}, generated={self.num_generated}/{self.output_len})"
        )
