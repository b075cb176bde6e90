"""A request's body read as JSON, as the engine server and the router both read it: every way a
client can send a body that is not a JSON value is that client's 4xx, never this process's 5xx.

413 over `max_body_bytes` (by Content-Length before reading, else while reading); 408 not all
there within `body_timeout_s` (slow senders); 400 an undecodable Content-Encoding, bytes that
are not UTF-8 JSON, or JSON nested too deeply for the parser (Python's recursion limit).
"""
from __future__ import annotations

import asyncio
import json

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError

from engines.server.errors import ApiError, ClientGone


async def read_json(request: web.Request, max_body_bytes: int, body_timeout_s: float) -> object:
    """The body's JSON value (any type: what it must be is the caller's check)."""
    if request.content_length is not None and request.content_length > max_body_bytes:
        raise ApiError(413, f"request body of {request.content_length} bytes is over the limit of {max_body_bytes} bytes")
    try:
        raw = await asyncio.wait_for(request.read(), timeout=body_timeout_s)
    except web.HTTPRequestEntityTooLarge:
        raise ApiError(413, f"request body is over the limit of {max_body_bytes} bytes") from None
    except TimeoutError:
        raise ApiError(408, f"the request body did not arrive within {body_timeout_s:g} s") from None
    except ConnectionResetError:  # the client left while sending: nobody to answer, nothing to log
        raise ClientGone() from None
    except (RequestPayloadError, HttpProcessingError, web.HTTPException, ValueError) as e:  # a bogus Content-Encoding
        raise ApiError(400, f"cannot read the request body: {type(e).__name__}: {e}", "body") from None
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise ApiError(400, f"the request body is not valid JSON: {e}", "body") from None
    except RecursionError:
        raise ApiError(400, "the request body nests JSON too deeply", "body") from None
