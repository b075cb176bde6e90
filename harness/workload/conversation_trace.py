"""Conversations rebuilt from a trace of conversation rounds (one row per round, in file order).

The ShareGPT trace (`openchat_sharegpt4`: every round of a conversation, the prompt being the
conversation so far) carries its turns implicitly: round k + 1 of a conversation has prompt
p(k+1) = p(k) + o(k) + u(k+1), the previous prompt and answer plus the new user message. With a
`conversation_id` column (what `python -m harness.data build` writes) rounds are grouped by it;
without one a row starts a new conversation when its prompt is shorter than the previous row's
prompt + output (the chain rule). Rows over max_total_tokens were dropped when the trace was made,
so a conversation there ends at its last kept round; rows with 0 prompt or output are refused.
With ids, a conversation's rounds must be consecutive rows in order: an empty id, an id that comes
back after another conversation's rows, or a round that does not extend the previous one is
refused, naming the file, row and column (never a conversation silently split or misread).
"""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd

from common.errors import HarnessError

from .paths import display_path
from .seeding import LENGTHS, rng_for
from .sessions import SessionDraft, SessionSettings, head_picks
from .trace_file import OUTPUT, PROMPT, read_frame, read_trace, where

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
    frame = read_frame(rows.path)
    ids = _conversation_ids(rows.path, frame)
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
        if min(users) < 0:  # grouped by id, yet a round does not extend the previous one (out of order)
            i = a + int(np.argmax(np.asarray(users) < 0))
            raise HarnessError(f"{where(rows.path, frame, i)}: {PROMPT} = {p[i]} is less than the previous round's "
                               f"{PROMPT} + {OUTPUT} ({p[i - 1]} + {o[i - 1]}) of {CONVERSATION} {ids[i]!r}: a "
                               "conversation's rounds must be in order, each growing by the previous answer and a new "
                               "message")
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


def _conversation_ids(path, frame: pd.DataFrame) -> np.ndarray | None:
    """The conversation id of every row (None: the file has no such column); every row was kept
    (read_trace refuses empty rounds, and a conversation trace is read without a length filter)."""
    if CONVERSATION not in frame.columns:
        return None
    ids = frame[CONVERSATION].astype(str).str.strip().to_numpy()
    empty = ids == ""
    if empty.any():
        raise HarnessError(f"{where(path, frame, int(np.argmax(empty)))}: {CONVERSATION} is empty: every round "
                           "needs the id of its conversation")
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    seen: dict[str, int] = {}
    for i in starts.tolist():
        if ids[i] in seen:
            raise HarnessError(f"{where(path, frame, i)}: {CONVERSATION} = {ids[i]!r} comes back after another "
                               f"conversation's rows (its rounds began at row {seen[ids[i]] + 1}): a conversation's "
                               "rounds must be consecutive rows, in order")
        seen[ids[i]] = i
    return ids
