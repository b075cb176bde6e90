"""`POST /v1/chat/completions`: the messages, checked and rendered into one prompt by a fixed
template, then served as a completion of that prompt.

The template is this server's own (it runs no Jinja): each message as `<|role|>` and its content
on the next line, then `<|assistant|>` to open the answer. A client that wants exact prompt
lengths measures the template's cost once (a chat prompt of n content tokens is n + k tokens,
k fixed), as the harness's endpoint backend does; `usage.prompt_tokens` counts the whole.
"""
from __future__ import annotations

import dataclasses

from engines.server.errors import ApiError
from engines.server.protocol import CompletionRequest, parse_completion

ROLES = ("system", "user", "assistant", "tool", "developer")


def _bad(message: str, param: str = "messages") -> ApiError:
    return ApiError(400, message, param)


def _content(msg: dict, i: int) -> str:
    content = msg.get("content")
    if isinstance(content, list):  # OpenAI's content parts: only text here
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise _bad(f"'messages[{i}].content' parts must be {{\"type\": \"text\", \"text\": ...}}; this server "
                           f"takes text only")
            texts.append(part["text"])
        content = "".join(texts)
    if not isinstance(content, str):
        raise _bad(f"'messages[{i}].content' must be a string, got {type(content).__name__}")
    return content


def render(messages: object) -> str:
    if not isinstance(messages, list) or not messages:
        raise _bad("'messages' must be a non-empty list of {role, content} objects")
    lines = []
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise _bad(f"'messages[{i}]' must be an object, got {type(msg).__name__}")
        role = msg.get("role")
        if role not in ROLES:
            raise _bad(f"'messages[{i}].role' must be one of {', '.join(ROLES)}, got {role!r}")
        lines += [f"<|{role}|>", _content(msg, i)]
    return "\n".join([*lines, "<|assistant|>", ""])


def parse_chat(body: object, vocab_size: int | None) -> CompletionRequest:
    if not isinstance(body, dict):
        raise _bad(f"the request body must be a JSON object, got {type(body).__name__}", "body")
    if "messages" not in body:
        raise _bad("'messages' is required")
    as_completion = {k: v for k, v in body.items() if k not in ("messages", "max_completion_tokens")}
    as_completion["prompt"] = render(body["messages"])
    if body.get("max_completion_tokens") is not None:  # OpenAI's newer name wins, as in vLLM
        as_completion["max_tokens"] = body["max_completion_tokens"]
    return dataclasses.replace(parse_completion(as_completion, vocab_size), chat=True)
