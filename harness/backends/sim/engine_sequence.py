"""The engine sequence for a request, with its tokens' identity (engines.core.Segments) when the
engine keeps a prefix cache (a request without segments gets segments of its own: it can hit
nothing, but its blocks are cached like any, as a server caches every request's).

Compiled with the engine core (engines/compiled.MODULES): made once per request released, its
Sequence and Segments built by direct calls. sessions.py names it `sim_sequence`, where the loops
take it from (and a test replaces it).
"""
from __future__ import annotations

from typing import Any

from engines.core import Segments, Sequence


def sim_sequence(seq_id: int, spec: Any, block_size: int | None, after: Sequence | None = None,
                 continued: bool = False) -> Sequence:
    """The engine's sequence for `spec` (a RequestSpec); with `block_size` (a prefix-caching
    engine's) it carries the identity of its tokens, continuing those of `after` (its session's
    previous turn, on the same engine) and `continued` by a later turn (engines/core/tokens.py:
    what the previous turn hashed and held is reused, checked)."""
    if block_size is None:
        return Sequence(seq_id, spec.prompt_len, spec.output_len)
    runs: tuple[tuple[int, int], ...]
    if spec.prompt_segments is None:  # negative ids: never a workload's segment
        runs = ((-2 * spec.request_id - 1, spec.prompt_len), (-2 * spec.request_id - 2, spec.output_len))
    else:
        out = spec.output_segment if spec.output_segment is not None else -2 * spec.request_id - 2
        runs = spec.prompt_segments + ((out, spec.output_len),)
    tokens = after.tokens if after is not None else None
    before = tokens if isinstance(tokens, Segments) else None
    return Sequence(seq_id, spec.prompt_len, spec.output_len, Segments(runs, block_size, before, continued))
