"""The null executor: every iteration takes zero time.

Serving through it measures the harness's own overhead (HTTP, SSE, the engine loop, the load
generator): whatever latency a run shows is not the model's. Token ids are made up.
"""
from __future__ import annotations

from engines.core import Batch
from engines.executors.base import SamplingParams

_FIRST_ID = 3  # 0-2 are conventionally <unk>, <s>, </s>: never emit an end-of-sequence by accident


class MadeUpTokens:
    """Made-up output token ids for executors that compute nothing (null, real-time perf model).

    Deterministic per (seed, request, position), so two runs of one workload stream the same
    ids; never 0-2 (conventionally <unk>, <s>, </s>), so no accidental end of sequence.
    """

    def __init__(self, vocab_size: int, seed: int = 0) -> None:
        if vocab_size <= _FIRST_ID:
            raise ValueError(f"vocab_size must be > {_FIRST_ID}, got {vocab_size}")
        self._span = vocab_size - _FIRST_ID
        self._seed = seed
        self._count: dict[int, int] = {}

    def add(self, seq_id: int) -> None:
        self._count[seq_id] = 0

    def free(self, seq_id: int) -> None:
        self._count.pop(seq_id, None)

    def sample(self, batch: Batch) -> list[int | None]:
        out: list[int | None] = []
        for seq, n in zip(batch.seqs, batch.new_tokens):
            if seq.num_computed + n < seq.prefill_target:
                out.append(None)  # a prefill chunk that is not the prompt's last samples nothing
                continue
            k = self._count.get(seq.seq_id, 0)
            self._count[seq.seq_id] = k + 1
            # A cheap integer hash: no RNG state per request, reproducible from (seed, id, k).
            h = (seq.seq_id * 0x9E3779B1 + k * 0x85EBCA77 + self._seed * 0xC2B2AE3D) & 0xFFFFFFFF
            out.append(_FIRST_ID + (h ^ (h >> 15)) % self._span)
        return out


class NullExecutor:
    # Zero-time execute(): the engine loop calls it inline instead of hopping to a worker thread.
    blocking = False

    def __init__(self, vocab_size: int = 32000, seed: int = 0) -> None:
        self._tokens = MadeUpTokens(vocab_size, seed)

    def add_request(self, seq_id: int, prompt_token_ids: list[int] | None, sampling: SamplingParams) -> None:
        self._tokens.add(seq_id)

    def execute(self, batch: Batch) -> list[int | None]:
        return self._tokens.sample(batch)

    def free(self, seq_id: int) -> None:
        self._tokens.free(seq_id)
