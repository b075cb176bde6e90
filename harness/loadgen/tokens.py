"""From one stream's timestamped SSE events to token times, counts, usage and server timings.

An event may carry several tokens (a server that falls behind coalesces them) or none (vLLM
sends some empty-text events). Tokens are counted, in order of preference, from
  `continuous_usage`  usage.completion_tokens on every chunk (cumulative; the delta is this event's),
  `token_ids`         the choice's token ids (our server always sends them; vLLM on request),
  `events`            one token per event with text, reconciled with the final usage total: the
                      least trustworthy, recorded so a reader can tell.
Each token gets its event's arrival time, so k tokens in one event are k equal times.

Every usage field the server sends is checked against the stream and against itself: a
completion count that grows on an event carrying no tokens (the final usage chunk claiming more
than was streamed), or by another number than the event's token ids, a prompt count that changes
mid-stream, a total that is not prompt + completion. Any of these is an error of kind `usage`:
a server whose accounting is inconsistent cannot be trusted on what it streamed.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

MALFORMED = "unparseable SSE event: "
USAGE_MISMATCH = "usage inconsistent: "


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
    model: str | None = None  # the `model` the chunks named ("a / b" if they named several)
    usage_sent: bool = False  # whether any chunk carried usage
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens (a prefix cache's hit)


class _Usage:
    """The usage fields seen so far and the first inconsistency among them."""

    __slots__ = ("cached", "completion", "error", "prompt", "sent")

    def __init__(self) -> None:
        self.prompt: int | None = None
        self.completion: int | None = None
        self.sent = False
        self.error: str | None = None
        self.cached: int | None = None  # prompt_tokens_details.cached_tokens, where the server reports it

    def take(self, usage: dict) -> None:
        self.sent = True
        prompt, completion, total = usage.get("prompt_tokens"), usage.get("completion_tokens"), usage.get("total_tokens")
        if prompt is not None:
            if self.prompt is not None and prompt != self.prompt:
                self.bad(f"prompt_tokens {self.prompt} then {prompt} in one stream")
            self.prompt = prompt
        if completion is not None:
            if self.completion is not None and completion < self.completion:
                self.bad(f"completion_tokens fell from {self.completion} to {completion}")
            self.completion = completion
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
        if cached is not None:
            self.cached = cached
        if total is not None and prompt is not None and completion is not None and total != prompt + completion:
            self.bad(f"total_tokens {total} != prompt_tokens {prompt} + completion_tokens {completion}")

    def bad(self, what: str) -> None:
        self.error = self.error or USAGE_MISMATCH + what


def parse_stream(events: list[tuple[float, bytes]]) -> ParsedStream:
    times: list[float] = []
    source = "none"
    usage = _Usage()
    finish = None
    timing = None
    error = None
    models: list[str] = []
    streamed_usage = None  # continuous usage: the count on the last chunk that carried choices
    for t, data in events:
        if data == b"[DONE]":
            continue
        try:
            obj = json.loads(data)
        except ValueError:
            obj = None
        if not isinstance(obj, dict):
            error = error or f"{MALFORMED}{data[:80]!r}"
            continue
        if "error" in obj:
            e = obj["error"]
            error = error or f"server error in stream: {e.get('message', e) if isinstance(e, dict) else e}"
            continue
        named = obj.get("model")
        if named is not None and named not in models:
            models.append(named)  # collect compares them with the model asked
        if "server_timing" in obj:
            timing = obj["server_timing"]
        u = obj.get("usage")
        before = usage.completion
        if u:
            usage.take(u)
        choices = obj.get("choices") or []
        if not choices:
            if u and streamed_usage is not None and usage.completion != streamed_usage:
                usage.bad(f"the final usage claims {usage.completion} completion tokens, the stream carried "
                           f"{streamed_usage}")
            continue  # the final usage-only chunk
        choice = choices[0]
        finish = choice.get("finish_reason") or finish
        ids = choice.get("token_ids")
        if u and u.get("completion_tokens") is not None:
            n = usage.completion - (before or 0)
            if ids is not None and n != len(ids):
                usage.bad(f"completion_tokens grew by {n} on an event with {len(ids)} token ids")
            streamed_usage = usage.completion
            source = "continuous_usage"
        elif ids is not None:
            n = len(ids)
            source = "token_ids" if source == "none" else source
        else:  # a completion's `text`, or a chat chunk's `delta.content`
            n = 1 if choice.get("text") or (choice.get("delta") or {}).get("content") else 0
            source = "events"
        times.extend([t] * n)
    completion = usage.completion
    if completion is not None and source in ("token_ids", "events") and completion != len(times):
        if source == "events" and completion > len(times) and times:
            # Event counting missed tokens coalesced into one event: put the surplus on the last event.
            times = times + [times[-1]] * (completion - len(times))
        else:
            usage.bad(f"usage claims {completion} completion tokens, the stream carried {len(times)}")
    return ParsedStream(times, source, usage.prompt, completion, finish, timing, error or usage.error, len(events),
                        " / ".join(map(str, models)) or None, usage.sent, usage.cached)
