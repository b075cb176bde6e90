"""The router's aiohttp application: one OpenAI-compatible address in front of in-repo servers.

Disaggregated (prefill and decode servers): a request goes to a prefill server (picked by
`router`) with max_tokens=1; its first token is streamed on to the client at once; the request
then goes, with what the prefill server reported, to a decode server (picked by `decode_router`
when the prefill is done, as the simulator routes a handoff at its first token), whose tokens
2..n are streamed through (engines/server/handoff.py, stitch.py). A request for one token never
leaves its prefill server. Replicas (colocated): each request goes whole to one server.

Routers are engines.routers policies over what the router itself sees: the requests it has
outstanding at each server (a request counts at a prefill server until its prefill answered, at
a decode server until its last token). least_kv needs each server's KV blocks, which the router
does not see, and is refused.

A request is checked as its server would check it (engines/server/body.py, protocol.py, chat.py:
the same code) before it goes anywhere, so a client's mistake is the server's own 4xx from the
router too, never a server's refusal midway through a disaggregated request turned into a 502.
Token ids against the vocabulary and the prompt's length against the model are the servers'
checks (the router has no model); a server refuses those before the client's stream begins, and
its answer is passed on. `kv_transfer_params` is the router's to set: a client's is refused.

Failures are never a silently short answer: an upstream's error before the client's stream began
is answered with its status and message; after, as an SSE error event (OpenAI's error shape)
before `[DONE]`, naming the server; a stream that ends early is such an error too.
"""
from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass

import aiohttp
from aiohttp import web

from common.sse import SseSplitter
from engines.core import DEFAULT_BLOCK_SIZE
from engines.routers import make_router
from engines.server.body import read_json
from engines.server.chat import parse_chat
from engines.server.config import ServerConfig
from engines.server.errors import ApiError, json_errors, quiet_client_faults
from engines.server.handoff import PARAM as KV_PARAM
from engines.server.protocol import CompletionRequest, parse_completion
from engines.server.router import stitch
from engines.server.router.fleet import Pool, render_metrics

PATHS = ("/v1/completions", "/v1/chat/completions")
PARSERS = {PATHS[0]: parse_completion, PATHS[1]: parse_chat}


def check_policy(name: str, what: str = "router") -> str:
    """An engines.routers policy this router can run (ValueError naming what it cannot)."""
    make_router(name)  # ValueError names the known ones
    if name == "least_kv":
        raise ValueError(f"{what} least_kv needs each server's KV blocks, which the in-repo router does not see; "
                         "use round_robin or least_outstanding")
    return name


@dataclass(frozen=True)
class RouterConfig:
    prefill: tuple[str, ...] = ()
    decode: tuple[str, ...] = ()
    replicas: tuple[str, ...] = ()
    router: str = "round_robin"
    decode_router: str | None = None  # default: `router`
    host: str = "127.0.0.1"
    port: int = 8000
    connect_timeout_s: float = 10.0
    shutdown_grace_s: float = 5.0
    max_body_bytes: int = ServerConfig.max_body_bytes  # a client's body, read as the servers read it
    body_timeout_s: float = ServerConfig.body_timeout_s
    router_options: tuple[tuple[str, object], ...] = ()  # the policy's knobs (engines.routers), for `router`
    block_size: int = DEFAULT_BLOCK_SIZE  # tokens a block, as the servers' prefix caches hash prompts

    def __post_init__(self) -> None:
        if bool(self.prefill) != bool(self.decode):
            raise ValueError(f"a disaggregated router needs prefill and decode servers, got {len(self.prefill)} "
                             f"prefill and {len(self.decode)} decode")
        if bool(self.replicas) == bool(self.prefill):
            raise ValueError("give either --prefill and --decode servers or --replica servers")
        for name in ("router", "decode_router"):
            if getattr(self, name) is not None:
                check_policy(getattr(self, name), name)
        make_router(self.router, **dict(self.router_options))  # ValueError naming an unknown or bad knob
        if isinstance(self.block_size, bool) or not isinstance(self.block_size, int) or self.block_size < 1:
            raise ValueError(f"block_size must be an integer >= 1, got {self.block_size!r}")
        if not self.body_timeout_s > 0:
            raise ValueError(f"body_timeout_s must be > 0, got {self.body_timeout_s}")
        for url in (*self.prefill, *self.decode, *self.replicas):
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"not an http(s) URL: {url!r}")


class _Failed(Exception):
    """An upstream failed this request; `answer`: what to tell a client whose stream has not
    begun (the prefill server's own refusal, e.g. a prompt too long), else a 502."""

    def __init__(self, message: str, answer: web.Response | None = None) -> None:
        super().__init__(message)
        self.answer = answer


class _ClientGone(Exception):
    """The client left mid-stream: nobody to answer, nothing to log (its upstream request is
    closed with the `async with` that held it, which aborts it there)."""


async def _to_client(client: web.StreamResponse, data: bytes | None) -> None:
    """A write to the client's stream (None: its end). Its failure is the client's, never the
    upstream's: aiohttp's ClientConnectionResetError is a ClientError too, and was once reported
    as the server's fault, with a traceback from writing that fault to the gone client."""
    try:
        await (client.write(data) if data is not None else client.write_eof())
    except ConnectionResetError:
        raise _ClientGone from None


def _upstream_message(status: int, text: str) -> str:
    try:
        return f"HTTP {status}: {json.loads(text)['error']['message']}"
    except (ValueError, KeyError, TypeError):
        return f"HTTP {status}: {text.strip()[:200]}"


async def _payloads(resp: aiohttp.ClientResponse):
    events = SseSplitter()
    async for chunk in resp.content.iter_any():
        for payload in events.feed(chunk):
            yield payload


class RouterServer:
    def __init__(self, cfg: RouterConfig) -> None:
        self.cfg = cfg
        knobs = dict(cfg.router_options)
        self.prefill = Pool(cfg.prefill, cfg.router, knobs, cfg.block_size) if cfg.prefill else None
        self.decode = Pool(cfg.decode, cfg.decode_router or cfg.router) if cfg.decode else None
        self.replicas = Pool(cfg.replicas, cfg.router, knobs, cfg.block_size) if cfg.replicas else None
        self.session: aiohttp.ClientSession | None = None
        self.draining = False

    # -- routes ------------------------------------------------------------------------------
    async def health(self, request: web.Request) -> web.Response:
        if self.draining:
            raise ApiError(503, "router is shutting down")
        return web.Response(status=200)

    async def models(self, request: web.Request) -> web.Response:
        url = (self.replicas or self.prefill).urls[0]
        try:
            async with self.session.get(url + "/v1/models", headers=self._auth(request)) as up:
                return web.Response(status=up.status, body=await up.read(), content_type=up.content_type)
        except (aiohttp.ClientError, asyncio.TimeoutError) as e:
            raise ApiError(502, f"server {url}: {type(e).__name__}: {e}") from None

    async def metrics(self, request: web.Request) -> web.Response:
        """The servers' prefix-cache counters, each under its label, and the routing counters (fleet.py)."""
        pool = self.replicas or self.prefill

        async def scrape(url: str) -> str | None:
            try:
                async with self.session.get(url + "/metrics", headers=self._auth(request)) as up:
                    return await up.text() if up.status == 200 else None
            except (aiohttp.ClientError, asyncio.TimeoutError):
                return None
        text = render_metrics(pool, list(await asyncio.gather(*(scrape(u) for u in pool.urls))))
        return web.Response(text=text, content_type="text/plain", charset="utf-8")

    async def lookup(self, url: str, ids: list[int]) -> int:
        """Leading blocks of `ids` server `url`'s prefix cache holds (0 if it cannot say)."""
        try:
            async with self.session.post(url + "/v1/cache/lookup", json={"prompt": ids}) as up:
                return int((await up.json())["cached_blocks"]) if up.status == 200 else 0
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, KeyError, TypeError):
            return 0

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, PATHS[0])

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, PATHS[1])

    # -- one request -------------------------------------------------------------------------
    async def _serve(self, request: web.Request, path: str) -> web.StreamResponse:
        arrival = time.monotonic()
        if self.draining:
            raise ApiError(503, "router is shutting down")
        body = await read_json(request, self.cfg.max_body_bytes, self.cfg.body_timeout_s)
        req = PARSERS[path](body, None)  # a client's mistake: the server's own 400, raised here
        if req.kv_transfer_params is not None:
            raise ApiError(400, f"'{KV_PARAM}' is set by the router between its servers, never by a client", KV_PARAM)
        if self.replicas is not None:
            return await self._relay(request, self.replicas, path, body)
        if req.max_tokens == 1:  # one token: the prefill server's answer is the whole answer
            return await self._relay(request, self.prefill, path, body)
        if req.stream:
            return await self._stream(request, path, body, req, arrival)
        return await self._whole(request, path, body, req.max_tokens, arrival)

    @staticmethod
    def _auth(request: web.Request) -> dict[str, str]:
        key = request.headers.get("Authorization")
        return {"Authorization": key} if key else {}

    async def _relay(self, request: web.Request, pool: Pool, path: str, body: dict) -> web.StreamResponse:
        """The request whole to one server of `pool`, its answer byte for byte."""
        i = await pool.pick(body)
        url = pool.urls[i]
        client = None
        try:
            async with self.session.post(url + path, json=body, headers=self._auth(request)) as up:
                if up.status != 200 or up.content_type != "text/event-stream":
                    return web.Response(status=up.status, body=await up.read(), content_type=up.content_type)
                client = await self._open(request)
                async for chunk in up.content.iter_any():
                    await _to_client(client, chunk)
                await _to_client(client, None)
                return client
        except _ClientGone:
            return client
        except (aiohttp.ClientError, asyncio.TimeoutError) as e:
            return await self._fail(request, client, _Failed(f"server {url}: {type(e).__name__}: {e}"))
        finally:
            pool.done(i)

    async def _stream(self, request: web.Request, path: str, body: dict, req: CompletionRequest, arrival: float):
        client = None
        try:
            client, first, stopped = await self._stream_prefill(request, path, body, req.max_tokens,
                                                                req.continuous_usage_stats)
            if stopped is not None:  # an end of sequence as its first token: nothing to decode
                if stopped and req.include_usage:
                    await _to_client(client, stitch.event({k: v for k, v in stopped.items() if k != "kv_transfer_params"}))
            else:
                await self._stream_decode(request, client, path, body, first, arrival)
            await _to_client(client, stitch.event(stitch.DONE))
            await _to_client(client, None)
        except _ClientGone:
            return client
        except _Failed as f:
            return await self._fail(request, client, f)
        return client

    async def _stream_prefill(self, request, path, body, n, continuous):
        """The prefill: its token sent on at once; (client stream, (source, report, made, timing),
        the final event if the prompt ended the sequence)."""
        p = await self.prefill.pick(body)
        url = self.prefill.urls[p]
        client, report, timing, usage, made, stop, done = None, None, None, None, 0, False, False
        try:
            async with self.session.post(url + path, json=stitch.prefill_body(body, n, True, continuous),
                                         headers=self._auth(request)) as up:
                if up.status != 200:
                    text = await up.read()
                    raise _Failed(f"prefill server {url}: {_upstream_message(up.status, text.decode(errors='replace'))}",
                                  web.Response(status=up.status, body=text, content_type=up.content_type))
                async for payload in _payloads(up):
                    if payload == stitch.DONE:
                        done = True
                        break
                    obj = json.loads(payload)
                    if "error" in obj:
                        raise _Failed(f"prefill server {url}: {obj['error'].get('message', obj['error'])}")
                    if obj.get("choices"):
                        choice = obj["choices"][0]
                        made += len(choice.get("token_ids") or ()) or 1
                        stop = choice.get("finish_reason") == "stop"
                        client = client or await self._open(request)
                        await _to_client(client, stitch.event(obj if stop else stitch.as_continuation(obj)))
                    elif "usage" in obj:
                        usage = obj
                    report = obj.get("kv_transfer_params", report)
                    timing = obj.get("server_timing", timing)
        except (aiohttp.ClientError, asyncio.TimeoutError) as e:
            raise _Failed(f"prefill server {url}: {type(e).__name__}: {e}") from None
        finally:
            self.prefill.done(p)
        if not done or client is None:
            raise _Failed(f"prefill server {url} ended its stream before " + ("[DONE]" if client else "a token"))
        if stop:
            return client, None, usage or {}
        if report is None:
            raise _Failed(f"prefill server {url} reported no kv_transfer_params: is it a --role prefill server?")
        return client, (p, report, made, timing), None

    async def _stream_decode(self, request, client, path, body, first, arrival) -> None:
        source, report, made, timing = first
        d = await self.decode.pick()
        url = self.decode.urls[d]
        done = False
        try:
            async with self.session.post(url + path, json=stitch.decode_body(body, source, report, True),
                                         headers=self._auth(request)) as up:
                if up.status != 200:
                    raise _Failed(f"decode server {url}: {_upstream_message(up.status, await up.text())}")
                async for payload in _payloads(up):
                    if payload == stitch.DONE:
                        done = True
                        break
                    if payload.startswith(b'{"error"'):
                        raise _Failed(f"decode server {url}: {json.loads(payload)['error'].get('message')}")
                    if b'"usage"' in payload or b'"server_timing"' in payload:
                        payload = json.dumps(stitch.continued(json.loads(payload), made, arrival, timing),
                                             separators=(",", ":")).encode()
                    await _to_client(client, stitch.event(payload))
        except (aiohttp.ClientError, asyncio.TimeoutError) as e:
            raise _Failed(f"decode server {url}: {type(e).__name__}: {e}") from None
        finally:
            self.decode.done(d)
        if not done:
            raise _Failed(f"decode server {url} ended its stream before [DONE]")

    async def _whole(self, request: web.Request, path: str, body: dict, n: int, arrival: float) -> web.Response:
        headers = self._auth(request)
        p = await self.prefill.pick(body)
        try:
            async with self.session.post(self.prefill.urls[p] + path, json=stitch.prefill_body(body, n, False),
                                         headers=headers) as up:
                if up.status != 200:
                    return web.Response(status=up.status, body=await up.read(), content_type=up.content_type)
                first = await up.json()
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as e:
            raise ApiError(502, f"prefill server {self.prefill.urls[p]}: {type(e).__name__}: {e}") from None
        finally:
            self.prefill.done(p)
        if first["choices"][0].get("finish_reason") == "stop" or "kv_transfer_params" not in first:
            return web.json_response(first)
        d = await self.decode.pick()
        try:
            async with self.session.post(self.decode.urls[d] + path, headers=headers,
                                         json=stitch.decode_body(body, p, first["kv_transfer_params"], False)) as up:
                if up.status != 200:
                    raise ApiError(502, f"decode server {self.decode.urls[d]}: "
                                        f"{_upstream_message(up.status, await up.text())}")
                rest = await up.json()
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as e:
            raise ApiError(502, f"decode server {self.decode.urls[d]}: {type(e).__name__}: {e}") from None
        finally:
            self.decode.done(d)
        return web.json_response(stitch.joined_whole(first, rest, arrival))

    @staticmethod
    async def _open(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        return resp

    @staticmethod
    async def _fail(request: web.Request, client: web.StreamResponse | None, f: _Failed) -> web.StreamResponse:
        if client is None:
            return f.answer or ApiError(502, str(f)).response()
        try:
            await _to_client(client, stitch.event(stitch.error_event(str(f))))
            await _to_client(client, stitch.event(stitch.DONE))
            await _to_client(client, None)
        except _ClientGone:
            pass  # the client left too: nobody to tell
        return client


ROUTER_KEY = web.AppKey("router", RouterServer)


def make_router_app(cfg: RouterConfig) -> web.Application:
    server = RouterServer(cfg)
    quiet_client_faults()
    app = web.Application(middlewares=[json_errors], client_max_size=cfg.max_body_bytes)
    app[ROUTER_KEY] = server
    app.router.add_post(PATHS[0], server.completions)
    app.router.add_post(PATHS[1], server.chat_completions)
    app.router.add_get("/v1/models", server.models)
    app.router.add_get("/health", server.health)
    app.router.add_get("/metrics", server.metrics)

    async def open_session(app: web.Application) -> None:
        server.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), auto_decompress=False,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=cfg.connect_timeout_s))
        for pool in (server.prefill, server.replicas):
            if pool is not None:
                pool.lookup = server.lookup

    async def close_session(app: web.Application) -> None:
        server.draining = True
        await server.session.close()

    app.on_startup.append(open_session)
    app.on_cleanup.append(close_session)
    return app
