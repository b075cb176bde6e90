"""Sessions in the load generator (harness/workload/sessions.py): a session's first request is
paced like any open-loop request; a later turn (`RequestSpec.after`) is sent `think_s` after the
response before it ended, as the simulator releases it. Its prompt is built then, by the caller's
`LoadOptions.session_prompt(spec, generated)`, `generated` being the token ids the server streamed
for the turn before (None when it did not name them): a chat client sends the model's own answer
back. A turn whose predecessor failed is never sent (its session ends there; recorded as not sent).
"""
from __future__ import annotations

import json
from collections.abc import Sequence

from common.sse import SseSplitter
from harness.records import RequestSpec, session_keys


class Sessions:
    def __init__(self, requests: Sequence[RequestSpec]) -> None:
        index = {r.request_id: i for i, r in enumerate(requests)}
        self.successor: list[int | None] = [None] * len(requests)
        for i, r in enumerate(requests):
            if r.after is not None:
                self.successor[index[r.after]] = i
        self.paced = [i for i, r in enumerate(requests) if r.after is None]
        self.users = session_keys(requests)  # each turn's session, sent as the body's `user`

    def turns_after(self, i: int) -> int:
        """How many turns follow request i in its session."""
        n, j = 0, self.successor[i]
        while j is not None:
            n, j = n + 1, self.successor[j]
        return n


def generated_ids(body: bytes) -> list[int] | None:
    """The token ids a stream's chunks named (`choices[0].token_ids`), or None if any chunk with
    a choice did not name them."""
    out: list[int] = []
    for data in SseSplitter().feed(body):
        if data == b"[DONE]":
            continue
        try:
            choices = json.loads(data).get("choices") or []
        except (ValueError, AttributeError):
            return None
        if not choices:
            continue
        ids = choices[0].get("token_ids")
        if ids is None:
            return None
        out.extend(ids)
    return out
