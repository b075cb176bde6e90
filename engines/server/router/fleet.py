"""The router's pools: servers of one role, the engines.routers policy that picks one for each
request (the simulator's cluster runs the same policy objects), and what the router reports of
them on its own `/metrics`.

A cache-aware policy sees the request as `RouteRequest`: its session is the body's `user`
(OpenAI's end-user id; the load generator names each conversation or agent so, as
harness.records.session_keys does in the simulator); its block hashes are the prompt's token ids
hashed as the servers' prefix caches hash them (engines.core.TokenIds, `block_size` tokens a
block). A prompt given as text (or chat messages) has no ids here (the router has no tokenizer):
its hashes are empty, and a prefix policy routes it by load. `prefix_exact` asks every server
how many of the prompt's leading blocks its cache holds (`POST /v1/cache/lookup`, the server's
engine answering from its block hashes) before it picks.

`/metrics` of the router: each server's prefix-cache counters under its own label
(`engine:prefix_cache_queries_total{server="0"}`, summed by a reader such as the harness's into
the fleet's hit rate), requests routed to each, and a prefix policy's decisions by branch.
"""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from common.prometheus import samples
from engines.core import DEFAULT_BLOCK_SIZE, TokenIds
from engines.routers import InstanceState, RouteRequest, make_router

CACHE_COUNTERS = ("prefix_cache_queries_total", "prefix_cache_hits_total")
Lookup = Callable[[str, list[int]], Awaitable[int]]  # (server URL, prompt ids) -> cached leading blocks


def route_request(body: dict, block_size: int) -> RouteRequest:
    """What a cache-aware policy sees of a request body."""
    user = body.get("user")
    prompt = body.get("prompt")
    ids = prompt if isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt) else []
    n = len(ids) // block_size
    hashes: tuple[int, ...] = ()
    if n:
        tokens = TokenIds(ids, block_size)
        tokens.block_hash(n - 1)
        hashes = tuple(tokens.hashes)
    return RouteRequest(user if isinstance(user, str) and user else None, hashes)


class Pool:
    """Servers of one role and the policy that picks one for each request."""

    def __init__(self, urls: tuple[str, ...], policy: str, knobs: dict | None = None,
                 block_size: int = DEFAULT_BLOCK_SIZE) -> None:
        self.urls = tuple(u.rstrip("/") for u in urls)
        self.router = make_router(policy, **(knobs or {}))
        self.block_size = block_size
        self.outstanding = [0] * len(self.urls)
        self.routed = [0] * len(self.urls)
        self.lookup: Lookup | None = None  # set by the router app once its HTTP session is open

    async def pick(self, body: dict | None = None) -> int:
        states = [InstanceState(n, 0, 0) for n in self.outstanding]
        if getattr(self.router, "needs_request", False) and body is not None:
            request = route_request(body, self.block_size)
            if self.router.needs_cache and request.block_hashes and self.lookup is not None:
                ids = body["prompt"]
                found = await asyncio.gather(*(self.lookup(url, ids) for url in self.urls))
                states = [InstanceState(n, 0, 0, c) for n, c in zip(self.outstanding, found)]
            i = self.router.choose(states, request)
        else:
            i = self.router.choose(states)
        self.outstanding[i] += 1
        self.routed[i] += 1
        return i

    def done(self, i: int) -> None:
        self.outstanding[i] -= 1


def render_metrics(pool: Pool, scraped: list[str | None]) -> str:
    """The router's /metrics: `scraped[i]` is server i's /metrics text (None: it did not answer)."""
    lines = []
    for name in CACHE_COUNTERS:
        lines.append(f"# TYPE engine:{name} counter")
        for i, text in enumerate(scraped):
            found = [v for n, _, v in samples(text or "") if n.partition(":")[2] == name]
            if found:  # a server without a prefix cache (or that did not answer) adds no line
                lines.append(f'engine:{name}{{server="{i}"}} {sum(found)}')
    lines.append("# TYPE router:requests_routed_total counter")
    lines += [f'router:requests_routed_total{{server="{i}"}} {n}' for i, n in enumerate(pool.routed)]
    decisions = getattr(pool.router, "decisions", None)
    if decisions is not None:
        lines.append("# TYPE router:decisions_total counter")
        lines += [f'router:decisions_total{{branch="{b}"}} {n}' for b, n in decisions.items()]
    return "\n".join(lines) + "\n"
