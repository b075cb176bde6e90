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
the running decodes, one prompt an iteration): Orca's iteration-level batching at its best. Under
pipeline parallelism Orca keeps one batch per stage in flight (Yu et al., OSDI'22, Sec. 4.2), so
its B is split across `micro_batches` (= pp) micro-batches of at most ceil(B / micro_batches)
sequences: the running decodes first, in arrival order, and a prompt only where a slot is left.
orca_worst: prefills and decodes never share an iteration: a prefill-only iteration of every
waiting request that fits, else a decode-only one (also request-level batching, when every request
has the same lengths).

All three reserve KV for max_model_len at admission, as the paper sizes B: B sequences of the
maximum length must fit the KV cache (`check_kv`: the engine refuses a B that does not), so
nothing is ever preempted.
"""
from __future__ import annotations

from engines.core import BasePolicy, Batch, Engine, Sequence
from engines.schedulers.registry import register_policy, require_positive


class _ReservedBatch(BasePolicy):
    """What the three policies share: reserved KV sized for B sequences of max_model_len."""

    reserves_kv = True
    max_batch_tokens = None  # whole prompts (orca_best, orca_worst); decode_maximal sets its own

    def __init__(self, max_num_seqs: int = 128) -> None:
        require_positive(max_num_seqs=max_num_seqs)
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


@register_policy("orca_best", chunk_size=None, tile_tokens=0)
@register_policy("decode_maximal", micro_batches=1)
class DecodeMaximalPolicy(_ReservedBatch):
    """The first Sarathi paper's decode-maximal batching: one prefill chunk an iteration, every running
    decode riding on it (orca_best: whole prompts, one an iteration, B split across `micro_batches`),
    KV reserved for max_model_len."""

    def __init__(self, max_num_seqs: int = 128, chunk_size: int | None = 256, tile_tokens: int = 0,
                 micro_batches: int = 1) -> None:
        """chunk_size: prefill tokens of the one chunk an iteration (None: whole prompts); tile_tokens:
        cut the chunk so chunk + decodes fills whole GEMM tiles of this many tokens (0: no cut);
        micro_batches: the micro-batches B is split across (set it to pp: one per pipeline stage)."""
        super().__init__(max_num_seqs)
        require_positive(chunk_size=chunk_size, micro_batches=micro_batches)
        # The most sequences one micro-batch holds (None: no cap below B). The pipeline's replay reads
        # it: a capped policy does not take every out-of-flight decode at once (harness/backends/sim/replay.py).
        self.max_micro_batch_seqs = None if micro_batches == 1 else -(-max_num_seqs // micro_batches)
        if tile_tokens < 0:
            raise ValueError(f"tile_tokens must be >= 0 (0: no tile alignment), got {tile_tokens}")
        self.chunk_size = chunk_size  # None: whole prompts (orca_best)
        self.tile_tokens = tile_tokens
        # One chunk and at most B - 1 decodes an iteration (whole prompts: no bound below a full batch's).
        self.max_batch_tokens = None if chunk_size is None else chunk_size + max_num_seqs - 1

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
        cap = self.max_micro_batch_seqs
        prefill = None
        if cap is not None and len(decodes) >= cap:
            decodes = decodes[:cap]  # a full micro-batch: the rest ride in the next one
        else:
            prefill = next((s for s in engine.running if s.is_prefill and not s.in_flight), None)
            if prefill is None:
                prefill = self._admit(engine)
        items: list[tuple[Sequence, int]] = [(s, 1) for s in decodes]
        if prefill is not None:
            items.append((prefill, self.chunk(prefill, len(decodes))))
        return Batch.build(items) if items else None


@register_policy("orca_worst")
class OrcaWorstPolicy(_ReservedBatch):
    """Orca's worst case, the first Sarathi paper's baseline: prefill-only batches of whole prompts,
    else decode-only ones (never mixed), KV reserved for max_model_len."""

    def schedule(self, engine: Engine) -> Batch | None:
        items: list[tuple[Sequence, int]] = []
        while (seq := self._admit(engine)) is not None:
            items.append((seq, seq.remaining_prefill))
        if not items:
            items = [(s, 1) for s in self._decodes(engine)]
        return Batch.build(items) if items else None
