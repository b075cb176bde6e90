"""One client answer from two servers' answers: the prefill server's first token, then the decode
server's tokens 2..n (engines/server/handoff.py). Pure functions over the parsed JSON events.

The decode server counts only what it made, so its usage gains the prefill's tokens; its
`server_timing` becomes the whole request's: the router's arrival, the prefill server's first
iteration, every token's time (the prefill's first), the decode server's end, both servers'
preemptions. Times are each server's CLOCK_MONOTONIC: one clock only when every server runs on
the router's host (the live backend starts them on loopback).
"""
from __future__ import annotations

import json

DONE = b"[DONE]"


def event(obj: dict | bytes) -> bytes:
    payload = obj if isinstance(obj, bytes) else json.dumps(obj, separators=(",", ":")).encode()
    return b"data: " + payload + b"\n\n"


def error_event(message: str, status: int = 502) -> dict:
    return {"error": {"message": message, "type": "upstream_error", "param": None, "code": status}}


def prefill_body(body: dict, max_tokens: int, stream: bool, continuous_usage: bool = False) -> dict:
    """The client's request as its prefill server gets it: one token, and the report a decode
    server needs asked for (streamed: on the final usage event)."""
    out = {k: v for k, v in body.items() if k not in ("max_completion_tokens", "stream_options")}
    out.update(max_tokens=1, stream=stream, kv_transfer_params={"do_remote_decode": True, "max_tokens": max_tokens})
    if stream:
        out["stream_options"] = {"include_usage": True, "continuous_usage_stats": continuous_usage}
    return out


def decode_body(body: dict, source: int, report: dict, stream: bool) -> dict:
    """The client's request as its decode server gets it: prefilled by prefill server `source`."""
    return {**body, "stream": stream, "kv_transfer_params": {"source": source, **report}}


def as_continuation(chunk: dict) -> dict:
    """The prefill server's token chunk, sent on while more tokens will follow."""
    choices = [{**c, "finish_reason": None} for c in chunk.get("choices") or []]
    return {k: v for k, v in chunk.items() if k not in ("server_timing", "kv_transfer_params")} | {"choices": choices}


def merged_timing(arrival: float, first: dict | None, rest: dict | None) -> dict | None:
    if not first or not rest:
        return rest or first
    return {
        "clock": "monotonic",
        "arrival": arrival,
        "first_scheduled": first.get("first_scheduled"),
        "token_times": list(first.get("token_times") or []) + list(rest.get("token_times") or []),
        "finished": rest.get("finished"),
        "num_preemptions": int(first.get("num_preemptions") or 0) + int(rest.get("num_preemptions") or 0),
    }


def continued(obj: dict, made: int, arrival: float, first_timing: dict | None) -> dict:
    """A decode server's event as the client's: usage counts the prefill's `made` tokens too,
    the timing is the whole request's."""
    usage = obj.get("usage")
    if usage:
        obj["usage"] = {**usage, "completion_tokens": usage.get("completion_tokens", 0) + made,
                        "total_tokens": usage.get("total_tokens", 0) + made}
    if "server_timing" in obj:
        obj["server_timing"] = merged_timing(arrival, first_timing, obj["server_timing"])
    return obj


def joined_whole(first: dict, rest: dict, arrival: float) -> dict:
    """Two non-streamed answers as one: texts and token ids concatenated."""
    a, b = first["choices"][0], rest["choices"][0]
    choice = dict(b)
    if "message" in b:
        choice["message"] = {**b["message"], "content": (a.get("message") or {}).get("content", "") + b["message"].get("content", "")}
    else:
        choice["text"] = a.get("text", "") + b.get("text", "")
    choice["token_ids"] = list(a.get("token_ids") or []) + list(b.get("token_ids") or [])
    made = len(a.get("token_ids") or []) or 1
    out = continued({**rest, "choices": [choice]}, made, arrival, first.get("server_timing"))
    out.pop("kv_transfer_params", None)
    return out
