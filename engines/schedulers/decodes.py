"""The decode pass shared by the paged-KV policies (Sarathi, vLLM, chunked-only)."""
from __future__ import annotations

from engines.core import Engine, Sequence


def schedule_decodes(engine: Engine) -> tuple[list[Sequence], list[Sequence]]:
    """Give every running decode one KV slot, preempting by recompute when the free list runs dry.

    Walks running sequences in priority order (arrival). When a decode needs a block and none is
    free, the lowest-priority sequence not yet visited is preempted; if none is left, the decode
    itself is (vLLM's and Sarathi-Serve's rule). Returns (decodes that got a slot, running
    prefills still waiting for chunks), both in priority order. Sequences in flight (pipeline
    parallelism) are skipped and never chosen as victims.
    """
    pending = [s for s in engine.running if not s.in_flight]
    blocks = engine.blocks
    block_size = blocks.block_size
    decodes: list[Sequence] = []
    prefills: list[Sequence] = []
    i = 0
    while i < len(pending):
        seq = pending[i]
        i += 1
        if seq.num_computed < seq.prefill_target:
            prefills.append(seq)
            continue
        # The new token's slot is at position num_computed: a new block only at a block boundary
        # (BlockManager.decode_headroom(seq) > 0, inlined: this runs for every decode of every
        # stepped iteration).
        if seq.num_computed < len(seq.block_table) * block_size:
            decodes.append(seq)
            continue
        while blocks.num_free == 0:
            if len(pending) > i:
                engine.preempt(pending.pop())
            else:
                engine.preempt(seq)
                break
        else:
            blocks.grow(seq, seq.num_computed + 1)
            decodes.append(seq)
    return decodes, prefills
