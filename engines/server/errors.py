"""Errors the server returns, in OpenAI's JSON error shape.

    {"error": {"message": "...", "type": "invalid_request_error", "param": "max_tokens", "code": 400}}

Clients (the OpenAI SDK, vLLM's benchmark, our load generator) read `error.message`; the HTTP
status says which kind: 400 invalid input, 404 unknown model or route, 408 body too slow, 413
body too large; 5xx only for the process's own faults (the router's 502: a server behind it).
Shared by the engine server and the router, so both answer a client's fault alike.
"""
from __future__ import annotations

import json
import logging

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "invalid_request_error",
    413: "invalid_request_error",
    500: "internal_server_error",
    502: "upstream_error",  # the router: a server behind it failed the request
    503: "service_unavailable",
}


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param

    def body(self) -> dict:
        return {
            "error": {
                "message": self.message,
                "type": _TYPES.get(self.status, "invalid_request_error"),
                "param": self.param,
                "code": self.status,
            }
        }

    def response(self) -> web.Response:
        return web.Response(status=self.status, text=json.dumps(self.body()), content_type="application/json")


class ClientGone(Exception):
    """The client closed its connection: a quiet end (debug log), not a server error."""


@web.middleware
async def json_errors(request: web.Request, handler):
    """Every error, ours or aiohttp's (unknown route, wrong method), in OpenAI's JSON shape."""
    try:
        return await handler(request)
    except ClientGone:
        logging.getLogger(__name__).debug("client %s left before its answer", request.remote)
        return web.Response(status=499)  # nginx's "client closed request"; never reaches anyone
    except ApiError as e:
        return e.response()
    except web.HTTPException as e:
        if e.status < 400:
            raise
        return ApiError(e.status, f"{e.reason}: {request.method} {request.path}").response()


class _ClientFaults(logging.Filter):
    """aiohttp drains a request's unread body after the handler answered; a body it cannot decode
    (a bogus Content-Encoding) then surfaces again as an "Unhandled exception". It is the
    client's fault and was answered 400: not an error of this process."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, (RequestPayloadError, HttpProcessingError))


def quiet_client_faults() -> None:
    """Keep a client's undecodable body out of aiohttp's error log (once per process)."""
    server_log = logging.getLogger("aiohttp.server")
    if not any(isinstance(f, _ClientFaults) for f in server_log.filters):
        server_log.addFilter(_ClientFaults())
