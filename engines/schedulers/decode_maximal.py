"""The first Sarathi paper's decode-maximal batching (Agrawal et al., "SARATHI: Efficient LLM
Inference by Piggybacking Decodes with Chunked Prefills", arXiv 2308.16369, Sec. 4), and Orca's
best and worst cases as that paper compares them (Sec. 5.3).

decode_maximal: every iteration holds at most ONE prefill chunk of `chunk_size` (C) tokens plus
every running decode; at most `max_num_seqs` (B) sequences run, so up to B - 1 decodes ride on a
chunk. The linear layers then read their weights once for the chunk and the decodes together.
With `tile_tokens` (T > 0) the chunk is cut so that chunk + decodes fills whole GEMM tiles:
floor((C + d) / T) x T - d for d decodes (the paper's 256 - (B - 1) with C = 256, T = 128,
d = B - 1 < T); a cut that would leave nothing keeps C. The ongoing prefill continues before a new
request is admitted (FCFS), decodes are never held back.

orca_best: the same with whole prompts (each new request's whole prefill shares its iteration with
the running decodes, one prompt an iteration): Orca's iteration-level batching at its best.
orca_worst: prefills and decodes never share an iteration: a prefill-only iteration of every
waiting request that fits, else a decode-only one (also request-level batching, when every request
has the same lengths).

All three reserve KV for max_model_len at admission, as the paper sizes B: B sequences of the
maximum length must fit the KV cache (`check_kv`: the engine refuses a B that does not), so
nothing is ever preempted.
"""
from __future__ import annotations

from engines.core import Batch, Engine, Sequence


class _ReservedBatch:
    """What the three policies share: reserved KV sized for B sequences of max_model_len."""

    reserves_kv = True

    def __init__(self, max_num_seqs: int) -> None:
        self.max_num_seqs = max_num_seqs

    def check_kv(self, num_blocks: int, blocks_per_seq: int) -> None:
        """Refuse a batch size B whose sequences of max_model_len do not all fit the KV cache."""
        fits = num_blocks // blocks_per_seq
        if self.max_num_seqs > fits:
            raise ValueError(
                f"batch size (max_num_seqs) {self.max_num_seqs} does not fit the KV cache: {fits} sequences of "
                f"max_model_len fit ({num_blocks} blocks, {blocks_per_seq} a sequence)")

    def _admit(self, engine: Engine) -> Sequence | None:
        """The head of the queue, admitted if a slot and its KV are free."""
        if engine.waiting and len(engine.running) < self.max_num_seqs and engine.blocks.can_admit(engine.waiting[0]):
            return engine.admit_next()
        return None

    @staticmethod
    def _decodes(engine: Engine) -> list[Sequence]:
        return [s for s in engine.running if not s.in_flight and not s.is_prefill]


class DecodeMaximalPolicy(_ReservedBatch):
    def __init__(self, max_num_seqs: int, chunk_size: int | None, tile_tokens: int = 0) -> None:
        super().__init__(max_num_seqs)
        self.chunk_size = chunk_size  # None: whole prompts (orca_best)
        self.tile_tokens = tile_tokens

    def chunk(self, seq: Sequence, decodes: int) -> int:
        """Prefill tokens of `seq` that ride with `decodes` decodes this iteration."""
        if self.chunk_size is None:
            return seq.remaining_prefill
        c = self.chunk_size
        if self.tile_tokens:
            aligned = (c + decodes) // self.tile_tokens * self.tile_tokens - decodes
            c = aligned if aligned > 0 else c
        return min(seq.remaining_prefill, c)

    def schedule(self, engine: Engine) -> Batch | None:
        decodes = self._decodes(engine)
        prefill = next((s for s in engine.running if s.is_prefill and not s.in_flight), None)
        if prefill is None:
            prefill = self._admit(engine)
        items: list[tuple[Sequence, int]] = [(s, 1) for s in decodes]
        if prefill is not None:
            items.append((prefill, self.chunk(prefill, len(decodes))))
        return Batch.build(items) if items else None


class OrcaWorstPolicy(_ReservedBatch):
    def schedule(self, engine: Engine) -> Batch | None:
        items: list[tuple[Sequence, int]] = []
        while (seq := self._admit(engine)) is not None:
            items.append((seq, seq.remaining_prefill))
        if not items:
            items = [(s, 1) for s in self._decodes(engine)]
        return Batch.build(items) if items else None
