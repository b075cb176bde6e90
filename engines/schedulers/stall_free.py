"""The body of Sarathi-Serve's schedule (sarathi.py), compiled: one call a simulated iteration.

SarathiPolicy stays an interpreted class (the registry reads its constructor's signature, which a
compiled class does not show), so its `schedule` hands its settings to `stall_free_batch`, which
is in the compiled build (engines/compiled.MODULES): its calls into the engine (the decode pass,
the cache's admission check, admit_next, Batch.mixed) are then native calls, not boxed ones
through the compiled modules' Python wrappers. It runs interpreted as well (a checkout without
the build, SARATHI_HARNESS_PURE=1), the same decisions.
"""
from __future__ import annotations

from engines.core.batch import Batch
from engines.core.engine import Engine
from engines.core.sequence import Sequence


def prompt_chunk(left: int, room: int, has_prefill: bool, chunked_prefill: bool) -> int:
    """The tokens of a prompt (`left` of it to compute) the batch takes with `room` left in its
    budget: chunked, as much as fits; whole prompts only, all of it where it fits or where the batch
    holds no prefill yet (alone, past the budget), else none."""
    if chunked_prefill:
        return max(0, min(left, room))
    if left <= room or not has_prefill:
        return left
    return 0


def stall_free_batch(engine: Engine, token_budget: int, max_num_seqs: int, chunked_prefill: bool) -> Batch | None:
    """Every running decode, then running prefills' chunks, then waiting requests admitted FCFS
    while the batch holds under `max_num_seqs` sequences, the cache admits the head and its budget
    has room (sarathi.py's docstring)."""
    decodes, prefills, contexts = engine.decode_pass()  # engines/core/decode_pass.py
    chunked: list[Sequence] = []
    chunks: list[int] = []
    used = len(decodes)
    has_prefill = False
    for seq in prefills:
        chunk = prompt_chunk(seq.prefill_target - seq.num_computed, token_budget - used, has_prefill, chunked_prefill)
        if chunk == 0:
            break
        chunked.append(seq)
        chunks.append(chunk)
        used += chunk
        has_prefill = True
    waiting = engine.waiting
    running = engine.running
    blocks = engine.blocks
    while waiting:
        seq = waiting[0]
        if len(running) >= max_num_seqs or not blocks.can_admit(seq):
            break
        chunk = prompt_chunk(seq.prefill_target - seq.num_computed, token_budget - used, has_prefill, chunked_prefill)
        if chunk == 0:
            break
        engine.admit_next()
        chunked.append(seq)
        chunks.append(chunk)
        used += chunk
        has_prefill = True
    return Batch.mixed(decodes, chunked, chunks, contexts) if decodes or chunked else None
