"""The decode pass: one KV slot for every running decode, as an engine operation the engine vouches for.

The paged-KV policies (Sarathi, vLLM, chunked-only, decode-only) all start an iteration the same
way: every running sequence past its prefill gets one decode token and, at a block boundary, one
more KV block, preempting by recompute when the free list runs dry. That walk checks, for each
decode it returns, everything the engine's batch check (checks.py) would check of it: running, not
in flight, past its prefill, its block table covering the token. So the engine records the decodes
it returned (`Engine.vouch`: those decodes and the engine's release count after the pass), and the
check of a batch that starts with exactly those, one token each, with no sequence released since
(a preemption, a finish, an abort: `Engine.releases`), checks only the rest of the batch (its
prefill chunks): one pass over the batch where there were two. A policy that builds its decodes
otherwise, drops or reorders them, or releases a sequence after the pass, is checked in full as
before (tests/test_engine_decode_pass.py). What the vouch cannot see is a policy writing a
sequence's fields or the block manager's books behind the engine's operations: no policy may
(ARCHITECTURE.md, "Policies"), and the full check would not catch every such write either.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engines.core.engine import Engine
    from engines.core.sequence import Sequence


def decode_pass(engine: Engine) -> tuple[list[Sequence], list[Sequence], list[int]]:
    """Give every running decode one KV slot, preempting by recompute when the free list runs dry.

    Walks running sequences in priority order (arrival). When a decode needs a block and none is
    free, the lowest-priority sequence not yet visited is preempted; if none is left, the decode
    itself is (vLLM's and Sarathi-Serve's rule). Returns (decodes that got a slot, running
    prefills still waiting for chunks, the decodes' contexts), in priority order. Sequences in
    flight (pipeline parallelism) are skipped and never chosen as victims.

    This runs for every decode of every stepped iteration: the walk reads the running list in
    place, and only once a block is needed with none free does the rest go the preempting way
    (`_preempting`) on a copy, which decides exactly as if the whole walk had gone that way.
    """
    blocks = engine.blocks
    block_size = blocks.block_size
    decodes: list[Sequence] = []
    prefills: list[Sequence] = []
    contexts: list[int] = []
    running = engine.running
    for i, seq in enumerate(running):
        if seq.in_flight:
            continue
        computed = seq.num_computed
        if computed < seq.prefill_target:
            prefills.append(seq)
            continue
        # The new token's slot is at position num_computed: a new block only at a block boundary
        # (BlockManager.decode_headroom(seq) > 0, inlined).
        if computed < len(seq.block_table) * block_size:
            decodes.append(seq)
        elif blocks.num_free:
            blocks.grow(seq, computed + 1)
            decodes.append(seq)
        else:
            _preempting(engine, [s for s in running[i:] if not s.in_flight], decodes, prefills, contexts)
            break
        contexts.append(computed)
    return decodes, prefills, contexts


def _preempting(engine: Engine, pending: list[Sequence], decodes: list[Sequence], prefills: list[Sequence],
                contexts: list[int]) -> None:
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
            contexts.append(seq.num_computed)
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
            contexts.append(seq.num_computed)
