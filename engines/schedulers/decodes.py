"""The decode pass shared by the paged-KV policies (Sarathi, vLLM, chunked-only, decode-only)."""
from __future__ import annotations

from engines.core import Engine, Sequence


def schedule_decodes(engine: Engine) -> tuple[list[Sequence], list[Sequence]]:
    """Give every running decode one KV slot, preempting by recompute when the free list runs dry:
    (decodes that got a slot, running prefills still waiting for chunks), in priority order.

    The engine's own operation (`Engine.decode_pass`, engines/core/decode_pass.py), so that the
    engine's check of a batch that starts with these decodes need not check them again."""
    decodes, prefills, _ = engine.decode_pass()
    return decodes, prefills
