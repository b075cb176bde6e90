"""The aiohttp application: OpenAI-compatible routes around the engine loop.

    POST /v1/completions   prompt (text or token ids), max_tokens, ignore_eos, temperature, top_p,
                           seed, stream (SSE), stream_options.{include_usage, continuous_usage_stats}
    POST /v1/chat/completions  messages (text; rendered by chat.py's template), the same options
    GET  /v1/models        the one served model
    GET  /health           200 when serving, 503 while shutting down
    GET  /metrics          Prometheus text (engine:* metrics, see stats.py)
    POST /v1/cache/lookup  {"prompt": [ids]}: the leading blocks the prefix cache holds (the router's prefix_exact)

With an API key (--api-key or $ENGINES_SERVER_API_KEY), /v1/* answer 401 without
`Authorization: Bearer KEY`; /health and /metrics stay open (as vLLM's --api-key does).

Streams: one SSE event per batch of new tokens the handler finds (one token when it keeps up,
several when it falls behind, as vLLM does), `data: [DONE]` last. The final data event carries
`server_timing` (arrival, first_scheduled, token_times, finished, num_preemptions on this
process's CLOCK_MONOTONIC) so a client can measure scheduling delay rather than guess it.
Every choice also carries its `token_ids` (vLLM's return_token_ids shape).

Roles (--role; engines/server/handoff.py): a prefill server ends every request at its first token
and reports `kv_transfer_params` for a decode server; a decode server also takes requests whose
prompt was prefilled elsewhere (`kv_transfer_params` in the body), waits for their KV as the twin
prices its transfer, and streams their tokens from the second on.

A client that disconnects cancels its handler (handler_cancellation), whose `finally` aborts
the request in the engine and frees its KV blocks.
"""
from __future__ import annotations

import asyncio
import hmac
import json
import time
import uuid

from aiohttp import web

from engines.core import TokenIds
from engines.executors.base import SamplingParams
from engines.server.body import read_json
from engines.server.build import ServingParts
from engines.server.chat import parse_chat
from engines.server.config import ServerConfig
from engines.server.errors import ApiError, ClientGone, json_errors, quiet_client_faults
from engines.server.handoff import Prefilled, parse_prefilled, remote_decode_max_tokens
from engines.server.loop import EngineLoop, RequestState
from engines.server.protocol import CompletionRequest, check_length, parse_completion
from engines.server.stats import render_prometheus


def _dumps(obj: dict) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


class CompletionServer:
    """The state the handlers share: config, engine loop, tokenizer, whether we are draining."""

    def __init__(self, cfg: ServerConfig, parts: ServingParts) -> None:
        self.cfg = cfg
        self.name = cfg.name
        self.parts = parts
        self.tokenizer = parts.tokenizer
        self.loop = EngineLoop(parts.engine, parts.executor,
                               eos_token_id=getattr(parts.tokenizer, "eos_token_id", None))
        self.draining = False
        self.created = int(time.time())

    # -- routes ------------------------------------------------------------------------------
    async def health(self, request: web.Request) -> web.Response:
        if self.draining:
            raise ApiError(503, "server is shutting down")
        return web.Response(status=200)

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({
            "object": "list",
            "data": [{
                "id": self.name, "object": "model", "created": self.created, "owned_by": "sarathi-harness",
                "root": self.name, "max_model_len": self.parts.max_model_len,  # a name, never a filesystem path
            }],
        })

    async def metrics(self, request: web.Request) -> web.Response:
        """`?audit=1` adds engine:kv_books_balanced, the block manager's audit of every block
        (O(blocks) on the event loop: asked for by a soak at rest, not scraped around probes)."""
        engine = self.parts.engine
        text = render_prometheus(
            self.loop.stats,
            running=len(engine.running),
            waiting=len(engine.waiting),
            blocks_used=engine.blocks.num_used,
            blocks_total=engine.blocks.num_blocks,
            preemptions=engine.num_preemptions,
            model=self.name,
            executor_metrics=getattr(self.parts.executor, "metrics", dict)(),
            prefix_cache=getattr(engine.blocks, "stats", None),
            cached_blocks=getattr(engine.blocks, "num_evictable", None),
            books_balanced=self.loop.books_balanced() if request.query.get("audit") == "1" else None,
        )
        return web.Response(text=text, content_type="text/plain", charset="utf-8",
                            headers={"X-Prometheus-Format": "0.0.4"})

    async def cache_lookup(self, request: web.Request) -> web.Response:
        """`{"prompt": [ids]}` -> the leading full blocks of it this server's prefix cache holds now
        (what the router's prefix_exact policy reads; no counter moves). Read on the event loop's
        thread, the only one that touches the core (loop.py)."""
        body = await read_json(request, self.cfg.max_body_bytes, self.cfg.body_timeout_s)
        ids = body.get("prompt")
        if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
            raise ApiError(400, "'prompt' must be a list of token ids", "prompt")
        blocks = self.parts.engine.blocks
        size, lookup = blocks.block_size, getattr(blocks, "cached_prefix", None)
        n = len(ids) // size
        found = 0
        if lookup is not None and n:
            tokens = TokenIds(ids, size)
            tokens.block_hash(n - 1)
            found = lookup(tokens.hashes)
        return web.json_response({"cached_blocks": found, "block_size": size})

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, parse_completion)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, parse_chat)

    async def _serve(self, request: web.Request, parse) -> web.StreamResponse:
        arrival = self.loop.clock()
        if self.draining:
            raise ApiError(503, "server is shutting down")
        req = await self._parse(request, parse)
        ids = list(req.prompt_token_ids) if req.prompt_token_ids is not None else self.tokenizer.encode(req.prompt_text)
        if not ids:
            raise ApiError(400, "'prompt' holds no tokens", "prompt")
        prefilled = self._handoff(req, len(ids))
        if prefilled is not None:  # the KV moves here from a prefill server: the twin waits its price
            lands = self.parts.kv_intake.lands(prefilled, len(ids), arrival)
            await asyncio.sleep(max(0.0, lands - self.loop.clock()))
        sampling = SamplingParams(req.temperature, req.top_p, req.seed, req.ignore_eos)
        try:
            state = self.loop.submit(ids, req.max_tokens, sampling, arrival, prefilled=prefilled is not None)
        except ValueError as e:
            raise ApiError(400, str(e), "prompt") from None
        rid = f"{'chatcmpl' if req.chat else 'cmpl'}-{uuid.uuid4().hex}"
        try:
            if req.stream:
                return await self._stream(request, state, req, rid)
            return await self._whole(state, req, rid)
        except ConnectionResetError:  # the client left mid-stream: its request is aborted below
            raise ClientGone() from None
        finally:
            self.loop.abort(state)  # a no-op once done; else the client left: free its KV now

    # -- helpers -----------------------------------------------------------------------------
    def _handoff(self, req: CompletionRequest, prompt_len: int) -> Prefilled | None:
        """The request's length checked as its role needs (handoff.py); a decode server's
        request prefilled elsewhere, or None."""
        role, params, max_len = self.cfg.role, req.kv_transfer_params, self.parts.max_model_len
        if role == "prefill":
            if req.max_tokens != 1:
                raise ApiError(400, f"a prefill server ends each request at its first token: max_tokens must be 1, "
                                    f"got {req.max_tokens} (a router sends the rest to a decode server)", "max_tokens")
            check_length(prompt_len, remote_decode_max_tokens(params) or 1, max_len)
            return None
        check_length(prompt_len, req.max_tokens, max_len)
        if params is None:
            return None
        if role != "decode":
            raise ApiError(400, f"'kv_transfer_params': this server (role {role}) computes prompts itself; only a "
                                "decode server takes requests prefilled elsewhere", "kv_transfer_params")
        return parse_prefilled(params, prompt_len, req.max_tokens, self.parts.kv_intake.sources)

    def _report(self, state: RequestState, req: CompletionRequest) -> dict:
        """What a prefill server tells the router for the decode server (handoff.py)."""
        if self.cfg.role != "prefill" or req.kv_transfer_params is None or not state.token_times:
            return {}
        spent = state.token_times[0] - state.first_scheduled
        return {"kv_transfer_params": {"prompt_tokens": state.seq.prompt_len, "prefill_s": max(0.0, spent)}}

    async def _parse(self, request: web.Request, parse) -> CompletionRequest:
        body = await read_json(request, self.cfg.max_body_bytes, self.cfg.body_timeout_s)
        if isinstance(body, dict) and "model" in body and body["model"] is not None:
            model = body["model"]
            if not isinstance(model, str):
                raise ApiError(400, f"'model' must be a string, got {model!r}", "model")
            if model != self.name:
                raise ApiError(404, f"The model `{model}` does not exist (this server serves `{self.name}`).", "model")
        return parse(body, self.parts.vocab_size)

    def _choice(self, ids: list[int], finish: str | None, chat: bool = False, first: bool = False,
                whole: bool = False) -> dict:
        text = "".join(self.tokenizer.decode_token(t) for t in ids)
        if not chat:
            return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "stop_reason": None,
                    "token_ids": ids}
        said = {"role": "assistant", "content": text} if first or whole else {"content": text}
        return {"index": 0, "message" if whole else "delta": said, "logprobs": None, "finish_reason": finish,
                "stop_reason": None, "token_ids": ids}

    @staticmethod
    def _object(req: CompletionRequest, stream: bool) -> str:
        if req.chat:
            return "chat.completion.chunk" if stream else "chat.completion"
        return "text_completion"

    @staticmethod
    def _usage(state: RequestState, completion_tokens: int) -> dict:
        p = state.seq.prompt_len
        usage = {"prompt_tokens": p, "completion_tokens": completion_tokens, "total_tokens": p + completion_tokens}
        if state.seq.tokens is not None:  # a prefix cache: as vLLM reports it, the prompt tokens found cached
            usage["prompt_tokens_details"] = {"cached_tokens": state.seq.cached_tokens}
        return usage

    async def _wait(self, state: RequestState, sent: int) -> None:
        while len(state.token_ids) == sent and not state.done:
            state.changed.clear()
            await state.changed.wait()

    async def _stream(self, request: web.Request, state: RequestState, req: CompletionRequest, rid: str):
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)  # a StreamResponse sends its head now, before any token
        head = {"id": rid, "object": self._object(req, True), "created": int(time.time()), "model": self.name}
        sent = 0
        while True:
            await self._wait(state, sent)
            ids = state.token_ids[sent:]
            sent += len(ids)
            last = state.done and sent == len(state.token_ids)
            if state.error is not None:
                await resp.write(b"data: " + _dumps({"error": ApiError(500, state.error).body()["error"]}) + b"\n\n")
                break
            if not ids and not last:
                continue
            continued = self.cfg.role == "decode" and req.kv_transfer_params is not None  # token 1 was the prefill's
            first = sent == len(ids) and not continued
            chunk = {**head, "choices": [self._choice(ids, state.finish_reason if last else None, req.chat,
                                                      first=first)]}
            if req.continuous_usage_stats:
                chunk["usage"] = self._usage(state, sent)
            if last and not req.include_usage:
                chunk["server_timing"] = state.timing()
                chunk.update(self._report(state, req))
            await resp.write(b"data: " + _dumps(chunk) + b"\n\n")
            if last:
                break
        if req.include_usage and state.error is None:
            final = {**head, "choices": [], "usage": self._usage(state, sent), "server_timing": state.timing(),
                     **self._report(state, req)}
            await resp.write(b"data: " + _dumps(final) + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def _whole(self, state: RequestState, req: CompletionRequest, rid: str) -> web.Response:
        while not state.done:
            state.changed.clear()
            await state.changed.wait()
        if state.error is not None:
            raise ApiError(500, state.error)
        n = len(state.token_ids)
        body = {
            "id": rid, "object": self._object(req, False), "created": int(time.time()), "model": self.name,
            "choices": [self._choice(state.token_ids, state.finish_reason, req.chat, whole=True)],
            "usage": self._usage(state, n),
            "server_timing": state.timing(),
            **self._report(state, req),
        }
        return web.Response(body=_dumps(body), content_type="application/json")


def _require_key(key: str):
    """OpenAI's (and vLLM's --api-key) rule: /v1/* needs `Authorization: Bearer KEY`; 401 otherwise."""
    expected = f"Bearer {key}".encode()

    @web.middleware
    async def check(request: web.Request, handler):
        if request.path.startswith("/v1/"):
            given = request.headers.get("Authorization", "").encode()
            if not hmac.compare_digest(given, expected):
                return ApiError(401, "Incorrect API key provided.").response()
        return await handler(request)

    return check


SERVER_KEY = web.AppKey("server", CompletionServer)


def make_app(cfg: ServerConfig, parts: ServingParts) -> web.Application:
    server = CompletionServer(cfg, parts)
    quiet_client_faults()
    # aiohttp enforces client_max_size when reading the body; we check Content-Length first.
    middlewares = [json_errors] + ([_require_key(cfg.api_key)] if cfg.api_key else [])
    app = web.Application(middlewares=middlewares, client_max_size=cfg.max_body_bytes)
    app[SERVER_KEY] = server
    app.router.add_post("/v1/completions", server.completions)
    app.router.add_post("/v1/chat/completions", server.chat_completions)
    app.router.add_get("/v1/models", server.models)
    app.router.add_get("/health", server.health)
    app.router.add_get("/metrics", server.metrics)
    app.router.add_post("/v1/cache/lookup", server.cache_lookup)

    async def start_loop(app: web.Application) -> None:
        server.loop.start()

    async def abort_all(app: web.Application) -> None:
        # Runs before aiohttp waits for handlers: aborted requests end their streams at once.
        server.draining = True
        server.loop.abort_all()

    async def stop_loop(app: web.Application) -> None:
        await server.loop.close()

    app.on_startup.append(start_loop)
    app.on_shutdown.append(abort_all)
    app.on_cleanup.append(stop_loop)
    return app
