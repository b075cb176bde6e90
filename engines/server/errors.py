"""Errors the server returns, in OpenAI's JSON error shape.

    {"error": {"message": "...", "type": "invalid_request_error", "param": "max_tokens", "code": 400}}

Clients (the OpenAI SDK, vLLM's benchmark, our load generator) read `error.message`; the HTTP
status says which kind: 400 invalid input, 404 unknown model or route, 413 body too large.
"""
from __future__ import annotations

import json

from aiohttp import web

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
