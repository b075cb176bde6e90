"""`POST /v1/completions`: the body's fields, checked, as a frozen `CompletionRequest`.

Only the fields a serving benchmark needs are interpreted; other OpenAI fields (`logprobs: null`,
`echo: false`, `user`, ...) that clients send by habit are accepted and ignored, unless they ask
for something this engine cannot do (n > 1, best_of > 1, echo), which is a 400 rather than a
silently different answer. Every message names the field and the value it got.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from engines.server.errors import ApiError

DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions


@dataclass(frozen=True, slots=True)
class CompletionRequest:
    prompt_token_ids: tuple[int, ...] | None  # None: `prompt_text` must be tokenized
    prompt_text: str | None
    max_tokens: int
    temperature: float
    top_p: float
    seed: int | None
    ignore_eos: bool
    stream: bool
    include_usage: bool
    continuous_usage_stats: bool
    chat: bool = False  # /v1/chat/completions: the prompt is the rendered messages (chat.py)
    kv_transfer_params: object = None  # disaggregated prefill/decode: checked by the server's role (handoff.py)


def _bad(message: str, param: str) -> ApiError:
    return ApiError(400, message, param)


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _bool(body: dict, key: str, default: bool, where: str = "") -> bool:
    v = body.get(key, default)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise _bad(f"'{where}{key}' must be a boolean, got {v!r}", where + key)
    return v


def _prompt(value: object, vocab_size: int | None) -> tuple[tuple[int, ...] | None, str | None]:
    # OpenAI accepts a string, a list of token ids, or a batch of either; a batch of one is fine.
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], (str, list)):
        value = value[0]
    if isinstance(value, str):
        if not value:
            raise _bad("'prompt' must not be empty", "prompt")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as e:  # a lone surrogate (JSON allows "\ud800"; UTF-8 does not)
            raise _bad(f"'prompt' is not valid Unicode: {e.reason} at position {e.start}", "prompt") from None
        return None, value
    if isinstance(value, list):
        if not value:
            raise _bad("'prompt' must not be empty", "prompt")
        if all(_is_int(t) for t in value):
            bad = next((t for t in value if t < 0 or (vocab_size is not None and t >= vocab_size)), None)
            if bad is not None:
                where = "negative" if vocab_size is None else f"out of vocabulary [0, {vocab_size})"
                raise _bad(f"token id {bad} in 'prompt' is {where}", "prompt")
            return tuple(value), None
        if all(isinstance(p, (str, list)) for p in value):
            raise _bad(f"'prompt' holds a batch of {len(value)} prompts; send one prompt per request", "prompt")
    raise _bad(
        f"'prompt' must be a string or a list of integer token ids, got {type(value).__name__}", "prompt"
    )


def parse_completion(body: object, vocab_size: int | None) -> CompletionRequest:
    """Check the JSON body's fields (not yet its length against the model: that needs the tokens).
    `vocab_size` None (the router, which has no model): token ids are checked against the
    vocabulary by the server that gets the request."""
    if not isinstance(body, dict):
        raise _bad(f"the request body must be a JSON object, got {type(body).__name__}", "body")
    if "prompt" not in body:
        raise _bad("'prompt' is required", "prompt")
    token_ids, text = _prompt(body["prompt"], vocab_size)

    max_tokens = body.get("max_tokens", DEFAULT_MAX_TOKENS)
    if max_tokens is None:
        max_tokens = DEFAULT_MAX_TOKENS
    if not _is_int(max_tokens):
        raise _bad(f"'max_tokens' must be an integer, got {max_tokens!r}", "max_tokens")
    if max_tokens < 1:
        raise _bad(f"'max_tokens' must be at least 1, got {max_tokens}", "max_tokens")

    temperature = body.get("temperature", 1.0)
    temperature = 1.0 if temperature is None else temperature
    if not _is_number(temperature) or temperature < 0:
        raise _bad(f"'temperature' must be a number >= 0, got {temperature!r}", "temperature")
    top_p = body.get("top_p", 1.0)
    top_p = 1.0 if top_p is None else top_p
    if not _is_number(top_p) or not 0 < top_p <= 1:
        raise _bad(f"'top_p' must be a number in (0, 1], got {top_p!r}", "top_p")
    seed = body.get("seed")
    if seed is not None and not _is_int(seed):
        raise _bad(f"'seed' must be an integer, got {seed!r}", "seed")
    for key in ("n", "best_of"):
        v = body.get(key)
        if v is not None and v != 1:
            raise _bad(f"'{key}' must be 1 (one completion per request), got {v!r}", key)
    if body.get("echo"):
        raise _bad("'echo' is not supported", "echo")

    stream = _bool(body, "stream", False)
    options = body.get("stream_options")
    include_usage = continuous = False
    if options is not None:
        if not stream:
            raise _bad("'stream_options' is only allowed when 'stream' is true", "stream_options")
        if not isinstance(options, dict):
            raise _bad(f"'stream_options' must be an object, got {type(options).__name__}", "stream_options")
        include_usage = _bool(options, "include_usage", False, "stream_options.")
        continuous = _bool(options, "continuous_usage_stats", False, "stream_options.")

    return CompletionRequest(
        prompt_token_ids=token_ids,
        prompt_text=text,
        max_tokens=max_tokens,
        temperature=float(temperature),
        top_p=float(top_p),
        seed=seed,
        ignore_eos=_bool(body, "ignore_eos", False),
        stream=stream,
        include_usage=include_usage,
        continuous_usage_stats=continuous,
        kv_transfer_params=body.get("kv_transfer_params"),
    )


def check_length(prompt_len: int, max_tokens: int, max_model_len: int) -> None:
    """vLLM's rule: prompt + max_tokens must fit the model's context."""
    if prompt_len + max_tokens > max_model_len:
        raise _bad(
            f"This model's maximum context length is {max_model_len} tokens. However, you requested "
            f"{prompt_len + max_tokens} tokens ({prompt_len} in the prompt, {max_tokens} in the completion). "
            "Please reduce the length of the prompt or completion.",
            "max_tokens",
        )
