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

    This runs for every decode of every stepped iteration: the walk reads the running list in
    place, and only once a block is needed with none free does the rest go the preempting way
    (`_preempting`) on a copy, which decides exactly as if the whole walk had gone that way.
    """
    blocks = engine.blocks
    block_size = blocks.block_size
    decodes: list[Sequence] = []
    prefills: list[Sequence] = []
    running = engine.running
    for i, seq in enumerate(running):
        if seq.in_flight:
            continue
        computed = seq.num_computed
        if computed < seq.prefill_target:
            prefills.append(seq)
        # The new token's slot is at position num_computed: a new block only at a block boundary
        # (BlockManager.decode_headroom(seq) > 0, inlined).
        elif computed < len(seq.block_table) * block_size:
            decodes.append(seq)
        elif blocks.num_free:
            blocks.grow(seq, computed + 1)
            decodes.append(seq)
        else:
            _preempting(engine, [s for s in running[i:] if not s.in_flight], decodes, prefills)
            break
    return decodes, prefills


def _preempting(engine: Engine, pending: list[Sequence], decodes: list[Sequence], prefills: list[Sequence]) -> None:
    """The walk over `pending` (running sequences not yet visited, not in flight, in priority
    order), preempting from its end when a decode finds no free block."""
    blocks = engine.blocks
    block_size = blocks.block_size
    i = 0
    while i < len(pending):
        seq = pending[i]
        i += 1
        if seq.num_computed < seq.prefill_target:
            prefills.append(seq)
            continue
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
