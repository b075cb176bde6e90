"""The two contracts every layer speaks: what to send (`RequestSpec`) and what happened (`RequestRecord`).

Times are seconds on one monotonic clock per run, 0 = start of the run. Both backends (sim and
live) produce the same `RequestRecord`s, so metrics never know which one ran.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True, slots=True)
class RequestSpec:
    request_id: int
    arrival_s: float
    prompt_len: int
    output_len: int
    prompt_token_ids: tuple[int, ...] | None = None
    prompt_text: str | None = None  # live runs against servers that take text (harness/workload/text_prompts.py)
    # Token identity without the tokens (harness/workload/sessions.py): the prompt as runs of
    # (segment id, tokens), the id of what its output is; a prefix cache hashes blocks by them.
    prompt_segments: tuple[tuple[int, int], ...] | None = None
    output_segment: int | None = None
    # A session's later turn: released `think_s` after request `after` finished (arrival_s is then
    # the session's start; the record's arrival_s is the release time).
    after: int | None = None
    think_s: float = 0.0


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """What happened to one request.

    `token_times_s` holds one time per output token, the first included (the iteration holding the
    request's last prefill chunk produces it), so a finished request has `output_len` entries and
    `output_len - 1` TBT samples. `first_scheduled_s` is the start of the first iteration that
    processed any of its prompt; NaN if it never started. `dispatched_s` is NaN in simulation.
    """

    request_id: int
    arrival_s: float
    prompt_len: int
    output_len: int
    first_scheduled_s: float
    first_token_s: float
    finished_s: float
    token_times_s: np.ndarray = field(repr=False)
    dispatched_s: float = float("nan")
    num_preemptions: int = 0
    error: str | None = None
    cached_tokens: int = 0  # prompt tokens a prefix cache held when it was first admitted

    @property
    def started(self) -> bool:
        # A server that does not report scheduling (vLLM) still shows a start by its first token.
        return not (np.isnan(self.first_scheduled_s) and np.isnan(self.first_token_s))

    @property
    def completed(self) -> bool:
        return self.error is None and len(self.token_times_s) == self.output_len


# What went wrong with a request, by kind (RequestRecord.error is the message; both backends and
# the load generator write messages these prefixes recognise). `unfinished` and `not_sent` are a
# time-limited probe's cut-off, judged by the latency criteria, not counted as errors.
PROMPT_MISCOUNT = "prompt counted as "  # + "N tokens by the server, planned M"
EXTRA_OUTPUT = "extra tokens: "  # + "received N, M asked"
WRONG_MODEL = "wrong model: "  # + "answered as X, asked for Y"
CUT_OFF_KINDS = ("unfinished", "not_sent")
# A simulated probe stopped once failing its criterion was certain (search.stop_early): what had not
# finished then carries this, a cut-off like a time limit's.
STOPPED_EARLY = "stopped early: the probe's failure was certain"
_PREFIXES = (
    ("unfinished at time limit", "unfinished"),
    (STOPPED_EARLY, "unfinished"),
    ("not sent before time limit", "not_sent"),
    ("aborted: ", "aborted"),
    ("HTTP ", "http_status"),
    ("timed out", "timeout"),
    ("received ", "short_output"),
    (EXTRA_OUTPUT, "extra_output"),
    ("stream ended early", "stream_cut"),
    ("stream did not end", "stream_cut"),
    ("stalled: ", "timeout"),
    (PROMPT_MISCOUNT, "prompt_len"),
    ("usage inconsistent: ", "usage"),  # harness/loadgen/tokens.py
    (WRONG_MODEL, "model"),
    ("unparseable SSE event", "malformed"),
    ("connect failed: ", "connect"),
    ("connection lost: ", "stream_cut"),
    ("ClientPayloadError", "stream_cut"),  # aiohttp's words, in runs saved before the client was ours
    ("ServerDisconnectedError", "stream_cut"),
    ("ClientConnectorError", "connect"),
    ("ClientConnectionError", "connect"),
    ("ClientOSError", "connect"),
    ("ServerTimeoutError", "timeout"),
)
ERROR_KINDS = (*dict.fromkeys(kind for _, kind in _PREFIXES), "other")


def error_kind(error: str | None) -> str | None:
    """The kind of a request's error message (ERROR_KINDS), None for a request without one."""
    if error is None:
        return None
    for prefix, kind in _PREFIXES:
        if error.startswith(prefix):
            return kind
    return "other"


def session_keys(requests) -> list[str | None]:
    """Each request's session as a router sees it (live: the body's `user`, OpenAI's end-user id):
    'session-<request id of its first turn>' for every turn of a session of two or more turns,
    None for a request on its own. The simulator and the load generator both name sessions so."""
    by_id = {r.request_id: r for r in requests}
    followed = {r.after for r in requests if r.after is not None}
    roots: dict[int, str] = {}  # request id -> its session's key
    out: list[str | None] = []
    for r in requests:
        after = r.after
        if after is None:
            key = f"session-{r.request_id}" if r.request_id in followed else None
        elif after in roots:  # the usual order: a turn after the one it follows
            key = roots[after]
        else:
            path, q = [], r
            while q.request_id not in roots and q.after is not None:
                path.append(q.request_id)
                q = by_id[q.after]
            key = roots.get(q.request_id, f"session-{q.request_id}")
            roots.update(dict.fromkeys(path, key))
        if key is not None:
            roots[r.request_id] = key
        out.append(key)
    return out
