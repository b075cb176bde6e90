"""Prompt token ids of session requests for live runs (harness/workload/sessions.py).

A segment's tokens are random non-special ids seeded by (seed, segment): the same wherever the
segment appears, so a server's prefix cache sees the shared prefixes the simulator's sees. A later
turn's prompt is its predecessor's prompt ids, then its answer, then the new message: with echoed
answers (the turn's answer segment is what the predecessor generated) the ids the server really
generated, as a chat client sends them back; if the server did not name them, the answer's own
seeded ids (counted in `fallbacks`: those turns cannot hit the answer's blocks). Only the newest
prompt of each session is kept.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

from harness.records import RequestSpec

from .prompts import allowed_ids, draw_ids
from .seeding import check_seed

SEGMENT_STREAM = 2  # rng_for sub-stream (token-id prompts use 0 and 1, text prompts 3)


class SessionPrompts:
    def __init__(self, requests: Sequence[RequestSpec], vocab_size: int, seed: int, special_ids: Iterable[int] = ()) -> None:
        self.ids = allowed_ids(vocab_size, special_ids)
        self.seed = check_seed(seed)
        self.by_id = {r.request_id: r for r in requests}
        self.latest: dict[int, list[int]] = {}  # request_id -> its prompt's ids, until the next turn is built
        self.fallbacks = 0

    def segment(self, seg: int, n: int) -> list[int]:
        return list(draw_ids(self.ids, n, (self.seed, SEGMENT_STREAM, seg)))

    def first(self, spec: RequestSpec) -> tuple[int, ...]:
        ids = [t for seg, n in spec.prompt_segments for t in self.segment(seg, n)]
        self.latest[spec.request_id] = ids
        return tuple(ids)

    def next(self, spec: RequestSpec, generated: list[int] | None) -> tuple[int, ...]:
        prev = self.by_id[spec.after]
        ids = self.latest.pop(prev.request_id)
        for seg, n in spec.prompt_segments[len(prev.prompt_segments):]:
            if seg == prev.output_segment:
                if generated is not None and len(generated) == n:
                    ids += generated
                    continue
                self.fallbacks += 1
            ids += self.segment(seg, n)
        self.latest[spec.request_id] = ids
        return tuple(ids)
