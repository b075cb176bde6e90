"""An OpenAI-compatible server that misbehaves on purpose, for the endpoint backend's tests:

    python -m tests.misbehaving_endpoint --port P --fault FAULT [--every N] [--max-model-len L]
                                         [--token-interval-s S] [--first-token-delay-s D]

It answers /health, /v1/models (with `max_model_len`, as vLLM does) and /v1/completions the way
vLLM does (one SSE event per token with its text, usage on every event when
`stream_options.continuous_usage_stats` is asked, a final usage-only chunk, `data: [DONE]`), but
every N-th completion request (every one with --every 1) gets FAULT:

  honest          none
  cut             the connection closed mid-stream, after half the tokens
  usage_lie       the final usage chunk claims 5 more completion tokens than were streamed
  other_model     every chunk names another model than the one asked for
  no_usage        no usage anywhere (stream_options ignored)
  never_end       every token streamed, then nothing: no final chunk, no [DONE], the stream left open
  non_json        events that are not JSON
  http500         HTTP 500
  prompt_miscount usage.prompt_tokens one more than the prompt sent
  extra_tokens    3 more tokens than max_tokens, usage counting them
"""
from __future__ import annotations

import argparse
import asyncio
import json
import time

from aiohttp import web

FAULTS = ("honest", "cut", "usage_lie", "other_model", "no_usage", "never_end", "non_json", "http500",
          "prompt_miscount", "extra_tokens")


class Misbehaving:
    def __init__(self, fault: str, every: int, model: str, max_model_len: int, token_interval_s: float,
                 first_token_delay_s: float) -> None:
        self.fault, self.every, self.model = fault, every, model
        self.max_model_len, self.token_interval_s = max_model_len, token_interval_s
        self.first_token_delay_s = first_token_delay_s
        self.count = 0

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [
            {"id": self.model, "object": "model", "owned_by": "tests", "max_model_len": self.max_model_len}]})

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.count += 1
        fault = self.fault if self.count % self.every == 0 else "honest"
        prompt = body["prompt"]
        prompt_len = len(prompt) if isinstance(prompt, list) else len(prompt.split())
        max_tokens = int(body.get("max_tokens", 16))
        if prompt_len + max_tokens > self.max_model_len:
            return web.json_response({"error": {"message": f"maximum context length is {self.max_model_len}",
                                                "type": "BadRequestError", "code": 400}}, status=400)
        if fault == "http500":
            return web.json_response({"error": {"message": "internal error (on purpose)", "type": "InternalServerError",
                                                "code": 500}}, status=500)
        n = max_tokens + (3 if fault == "extra_tokens" else 0)
        usage_prompt = prompt_len + (1 if fault == "prompt_miscount" else 0)
        model = "someone-else" if fault == "other_model" else body.get("model", self.model)

        def usage(done: int) -> dict:
            return {"prompt_tokens": usage_prompt, "completion_tokens": done, "total_tokens": usage_prompt + done}

        if not body.get("stream"):
            return web.json_response({"id": "cmpl-1", "object": "text_completion", "model": model,
                                      "choices": [{"index": 0, "text": " tok" * n, "finish_reason": "length"}],
                                      "usage": usage(n)})
        options = body.get("stream_options") or {}
        send_usage = fault != "no_usage" and options.get("include_usage")
        continuous = send_usage and options.get("continuous_usage_stats")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        created = int(time.time())
        await asyncio.sleep(self.first_token_delay_s)
        for i in range(n):
            await asyncio.sleep(self.token_interval_s)
            if fault == "non_json":
                await resp.write(b"data: tok\n\n")
                continue
            chunk = {"id": "cmpl-1", "object": "text_completion", "created": created, "model": model,
                     "choices": [{"index": 0, "text": " tok", "finish_reason": "length" if i == n - 1 else None}]}
            if continuous:
                chunk["usage"] = usage(i + 1)
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            if fault == "cut" and i == n // 2:
                request.transport.close()  # mid-stream, before the chunked body's end
                return resp
        if fault == "never_end":
            await asyncio.Event().wait()  # until the client gives up
        if send_usage:
            claimed = n + (5 if fault == "usage_lie" else 0)
            final = {"id": "cmpl-1", "object": "text_completion", "created": created, "model": model, "choices": [],
                     "usage": usage(claimed)}
            await resp.write(b"data: " + json.dumps(final).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--fault", choices=FAULTS, default="honest")
    ap.add_argument("--every", type=int, default=1, help="the fault hits every N-th completion request")
    ap.add_argument("--model", default="misbehaving")
    ap.add_argument("--max-model-len", type=int, default=1024)
    ap.add_argument("--token-interval-s", type=float, default=0.002)
    # one timer per request, not one per token: its time does not grow when a loaded machine
    # wakes each sleeper late (~100 tokens at 2 ms each took over 1 s on a loaded CI machine)
    ap.add_argument("--first-token-delay-s", type=float, default=0.0)
    a = ap.parse_args()
    server = Misbehaving(a.fault, a.every, a.model, a.max_model_len, a.token_interval_s, a.first_token_delay_s)
    app = web.Application()
    app.router.add_get("/health", server.health)
    app.router.add_get("/v1/models", server.models)
    app.router.add_post("/v1/completions", server.completions)
    # never_end holds its streams open on purpose: stop without waiting for them (aiohttp waits 60 s)
    web.run_app(app, host="127.0.0.1", port=a.port, print=None, handle_signals=True, shutdown_timeout=0.5)


if __name__ == "__main__":
    main()
