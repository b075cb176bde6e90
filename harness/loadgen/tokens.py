"""From one stream's timestamped SSE events to token times, counts, usage and server timings.

An event may carry several tokens (a server that falls behind coalesces them) or none (vLLM
sends some empty-text events). Tokens are counted, in order of preference, from
  `continuous_usage`  usage.completion_tokens on every chunk (cumulative; the delta is this event's),
  `token_ids`         the choice's token ids (our server always sends them; vLLM on request),
  `events`            one token per event with text, reconciled with the final usage total: the
                      least trustworthy, recorded so a reader can tell.
Each token gets its event's arrival time, so k tokens in one event are k equal times.
"""
from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True)
class ParsedStream:
    token_times: list[float]
    source: str  # continuous_usage | token_ids | events | none
    prompt_tokens: int | None  # from usage, when the server sent it
    completion_tokens: int | None
    finish_reason: str | None
    server_timing: dict | None
    error: str | None
    num_events: int


def parse_stream(events: list[tuple[float, bytes]]) -> ParsedStream:
    times: list[float] = []
    source = "none"
    prompt_tokens = completion = None
    finish = None
    timing = None
    error = None
    prev_usage = 0
    for t, data in events:
        if data == b"[DONE]":
            continue
        try:
            obj = json.loads(data)
        except ValueError:
            error = f"unparseable SSE event: {data[:80]!r}"
            continue
        if "error" in obj:
            e = obj["error"]
            error = f"server error in stream: {e.get('message', e) if isinstance(e, dict) else e}"
            continue
        if "server_timing" in obj:
            timing = obj["server_timing"]
        usage = obj.get("usage")
        if usage:
            prompt_tokens = usage.get("prompt_tokens", prompt_tokens)
            completion = usage.get("completion_tokens", completion)
        choices = obj.get("choices") or []
        if not choices:
            continue  # the final usage-only chunk
        choice = choices[0]
        finish = choice.get("finish_reason") or finish
        if usage and usage.get("completion_tokens") is not None:
            n = usage["completion_tokens"] - prev_usage
            prev_usage = usage["completion_tokens"]
            source = "continuous_usage"
        elif choice.get("token_ids") is not None:
            n = len(choice["token_ids"])
            source = "token_ids" if source == "none" else source
        else:  # a completion's `text`, or a chat chunk's `delta.content`
            n = 1 if choice.get("text") or (choice.get("delta") or {}).get("content") else 0
            source = "events"
        times.extend([t] * n)
    if source == "events" and completion is not None and times and completion != len(times):
        # Event counting missed tokens coalesced into one event: put the surplus on the last event.
        last = times[-1]
        times = times[:completion] + [last] * max(0, completion - len(times))
    return ParsedStream(times, source, prompt_tokens, completion, finish, timing, error, len(events))
