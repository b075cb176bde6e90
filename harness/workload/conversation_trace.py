"""Conversations rebuilt from a trace of conversation rounds (one row per round, in file order).

The ShareGPT trace (`openchat_sharegpt4`: every round of a conversation, the prompt being the
conversation so far) carries its turns implicitly: round k + 1 of a conversation has prompt
p(k+1) = p(k) + o(k) + u(k+1), the previous prompt and answer plus the new user message. With a
`conversation_id` column (what `python -m harness.data build` writes) rounds are grouped by it;
without one a row starts a new conversation when its prompt is shorter than the previous row's
prompt + output (the chain rule). Rows over max_total_tokens were dropped when the trace was made,
so a conversation there ends at its last kept round; rows with 0 prompt or output are refused.
"""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd

from common.errors import HarnessError

from .paths import display_path
from .seeding import LENGTHS, rng_for
from .sessions import SessionDraft, SessionSettings, head_picks
from .trace_file import OUTPUT, PROMPT, read_trace

CONVERSATION = "conversation_id"


def conversation_drafts(spec: SessionSettings, trace_file: str, sampling: str,
                        seed: int) -> tuple[Iterator[SessionDraft], str]:
    """The trace's conversations as sessions, in file order (sampling: sequential) or shuffled with
    `seed` (shuffle; passes repeat while more are taken)."""
    rows = read_trace(trace_file, None)
    if rows.dropped_empty:
        raise HarnessError(f"{display_path(rows.path)}: {rows.dropped_empty} rounds with 0 prompt or output tokens; "
                           "a conversation cannot be rebuilt around them")
    p, o = rows.prompt_lens, rows.output_lens
    ids = _conversation_ids(rows.path, p.size)
    if ids is None:
        starts = np.r_[True, p[1:] < p[:-1] + o[:-1]]
        rule = "chain rule"
    else:
        starts = np.r_[True, ids[1:] != ids[:-1]]
        rule = CONVERSATION
    first = np.flatnonzero(starts)
    bounds = np.r_[first, p.size]
    conversations = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        users = [int(p[a])] + (p[a + 1:b] - p[a:b - 1] - o[a:b - 1]).tolist()
        if min(users) < 0:  # grouped by id, yet a round does not extend the previous one
            raise HarnessError(f"{display_path(rows.path)}: row {a + 1}: conversation rounds must grow by the previous "
                               "answer and a new message (prompt >= previous prompt + output)")
        conversations.append(list(zip(users, o[a:b].tolist())))
    turns = np.array([len(c) for c in conversations])
    origin = (f"{len(conversations)} conversations rebuilt ({rule}) from {rows.path.name} "
              f"({p.size} rounds; turns mean {turns.mean():.2f}, max {turns.max()})")
    return _replayed(spec, conversations, sampling, seed), origin


def _replayed(spec: SessionSettings, conversations: list, sampling: str, seed: int) -> Iterator[SessionDraft]:
    """In file order (sequential: once), or shuffled passes over the conversations (shuffle)."""
    heads = head_picks(spec, seed)
    if sampling == "sequential":
        for c in conversations:
            yield SessionDraft(next(heads), c)
        return
    rng = rng_for(LENGTHS, seed)
    while True:
        for i in rng.permutation(len(conversations)):
            yield SessionDraft(next(heads), conversations[i])


def _conversation_ids(path, rows: int) -> np.ndarray | None:
    if path.suffix in (".jsonl", ".ndjson"):
        frame = pd.read_json(path, lines=True)
    else:
        frame = pd.read_csv(path)
    if CONVERSATION not in frame.columns:
        return None
    frame = frame[(frame[PROMPT] >= 1) & (frame[OUTPUT] >= 1)]
    ids = frame[CONVERSATION].to_numpy()
    return ids if ids.size == rows else None
