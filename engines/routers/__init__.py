"""Routers: which engine instance of a cluster gets a new request, from the instances' observable
state only (requests outstanding, KV blocks used, and for cache-aware routers what is known of the
request and of each instance's prefix cache), like a scheduler policy: pure Python, no clock, no
I/O, deterministic. Each policy is a class with `choose(states, request) -> index`; ties go to the
lowest index. A router may keep state of its own (round robin's turn, an approximate router's
index of what it sent), never the instances'. Knobs are constructor parameters (`make_router(name,
**knobs)` refuses an unknown or bad one with ValueError naming it); the cache-aware routers are in
`cache_aware.py`.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class InstanceState:
    """What a router sees of one instance when a request arrives."""

    outstanding: int  # requests routed to it and not finished yet
    kv_blocks_used: int
    kv_blocks_total: int
    # Leading blocks of the request's prompt its prefix cache holds now; filled in only for a
    # router that `needs_cache` (the caller looks the request's block hashes up in the engine).
    cached_blocks: int = 0
    # Who the instance is, where the set of instances changes during a run (an autoscaled fleet:
    # the replica's start order); None: instance i of a fixed set is i. Session affinity's ring
    # is over these, so a replica added or drained moves only the sessions it takes or held.
    instance_id: int | None = None

    @property
    def kv_used_fraction(self) -> float:
        return self.kv_blocks_used / self.kv_blocks_total if self.kv_blocks_total else 0.0


@dataclass(frozen=True)
class RouteRequest:
    """What a cache-aware router sees of the request (given only to a router that `needs_request`):
    its session (a conversation's or agent's id; None: a request on its own) and the chained
    hashes of its prompt's full blocks (engines.core.tokens; empty when its tokens are unknown)."""

    session: str | None = None
    block_hashes: tuple[int, ...] = ()


class Router(Protocol):
    name: str
    needs_state: bool  # False: choose() ignores the states (the simulator may route ahead)
    needs_request: bool  # True: choose() reads a RouteRequest
    needs_cache: bool  # True: each state's cached_blocks must be filled in

    def choose(self, states: list[InstanceState], request: RouteRequest | None = None) -> int: ...

    # Optional: `static_choice(request, n) -> int | None`, the instance `choose` would give
    # `request` among n whatever their state (None: the state decides); session_affinity has it.
    # For a request with a session it must be a function of the session alone (every turn goes
    # where the first went): a simulator asks it once a session (harness/backends/sim/partition.py).


def least_outstanding(states: list[InstanceState]) -> int:
    return min(range(len(states)), key=lambda i: (states[i].outstanding, i))


class RoundRobin:
    """Instances in turn, whatever their state."""

    name = "round_robin"
    needs_state = False  # its choices can be made before the run
    needs_request = needs_cache = False

    def __init__(self) -> None:
        self.turn = 0

    def choose(self, states: list[InstanceState], request: RouteRequest | None = None) -> int:
        i = self.turn % len(states)
        self.turn = i + 1
        return i


class LeastOutstanding:
    """The instance with the fewest requests outstanding (vLLM's and Dynamo's default balancing)."""

    name = "least_outstanding"
    needs_state = True
    needs_request = needs_cache = False

    def choose(self, states: list[InstanceState], request: RouteRequest | None = None) -> int:
        return least_outstanding(states)


class LeastKv:
    """The instance with the smallest share of its KV blocks in use (then fewest outstanding)."""

    name = "least_kv"
    needs_state = True
    needs_request = needs_cache = False

    def choose(self, states: list[InstanceState], request: RouteRequest | None = None) -> int:
        return min(range(len(states)), key=lambda i: (states[i].kv_used_fraction, states[i].outstanding, i))


class VllmDp:
    """vLLM's data-parallel load balancer (vllm 0.32.0 v1/engine/core_client.py
    DPLBAsyncMPClient.get_core_engine_for_request, one API server): the engine with the lowest
    score = its unfinished requests from this client, scanned from a start index that moves on by
    one every request, so ties rotate instead of favouring rank 0. Not modelled: the stale
    waiting + running snapshot (at most the exact in-flight count with one client) and the penalty
    of waiting requests above 50 % KV use (the state has no waiting count)."""

    name = "vllm_dp"
    needs_state = True
    needs_request = needs_cache = False

    def __init__(self) -> None:
        self.start = 0

    def choose(self, states: list[InstanceState], request: RouteRequest | None = None) -> int:
        n = len(states)
        order = [(self.start + i) % n for i in range(n)]
        self.start = (self.start + 1) % n
        return min(order, key=lambda i: states[i].outstanding)  # the first minimum of the scan


from engines.routers.cache_aware import PrefixAware, PrefixExact, SessionAffinity  # noqa: E402  (they use the above)

ROUTERS: dict[str, type] = {r.name: r for r in (RoundRobin, LeastOutstanding, LeastKv, VllmDp, SessionAffinity,
                                                PrefixAware, PrefixExact)}


def router_knobs(name: str) -> dict[str, object]:
    """The knobs of router `name` and their defaults (its constructor's parameters)."""
    cls = ROUTERS[name]
    return {p.name: p.default for p in inspect.signature(cls.__init__).parameters.values() if p.name != "self"}


def make_router(name: str, **knobs) -> Router:
    try:
        cls = ROUTERS[name]
    except KeyError:
        raise ValueError(f"unknown router {name!r}; known: {', '.join(ROUTERS)}") from None
    unknown = sorted(set(knobs) - set(router_knobs(name)))
    if unknown:
        known = ", ".join(router_knobs(name)) or "none"
        raise ValueError(f"router {name} has no knob {unknown[0]!r}; its knobs: {known}")
    return cls(**knobs)


__all__ = ["ROUTERS", "InstanceState", "LeastKv", "LeastOutstanding", "PrefixAware", "PrefixExact", "RoundRobin",
           "RouteRequest", "Router", "SessionAffinity", "VllmDp", "make_router", "router_knobs"]
