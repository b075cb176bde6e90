"""Routers: which engine instance of a cluster gets a new request, from the instances' observable
state only (requests outstanding, KV blocks used), like a scheduler policy: pure Python, no clock,
no I/O, deterministic. Each policy is a class with `choose(states) -> index`; ties go to the
lowest index. A router may keep state of its own (round robin's turn), never the instances'.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class InstanceState:
    """What a router sees of one instance when a request arrives."""

    outstanding: int  # requests routed to it and not finished yet
    kv_blocks_used: int
    kv_blocks_total: int

    @property
    def kv_used_fraction(self) -> float:
        return self.kv_blocks_used / self.kv_blocks_total if self.kv_blocks_total else 0.0


class Router(Protocol):
    name: str
    needs_state: bool  # False: choose() ignores the states (the simulator may route ahead)

    def choose(self, states: list[InstanceState]) -> int: ...


class RoundRobin:
    """Instances in turn, whatever their state."""

    name = "round_robin"
    needs_state = False  # its choices can be made before the run

    def __init__(self) -> None:
        self.turn = 0

    def choose(self, states: list[InstanceState]) -> int:
        i = self.turn % len(states)
        self.turn = i + 1
        return i


class LeastOutstanding:
    """The instance with the fewest requests outstanding (vLLM's and Dynamo's default balancing)."""

    name = "least_outstanding"
    needs_state = True

    def choose(self, states: list[InstanceState]) -> int:
        return min(range(len(states)), key=lambda i: (states[i].outstanding, i))


class LeastKv:
    """The instance with the smallest share of its KV blocks in use (then fewest outstanding)."""

    name = "least_kv"
    needs_state = True

    def choose(self, states: list[InstanceState]) -> int:
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

    def __init__(self) -> None:
        self.start = 0

    def choose(self, states: list[InstanceState]) -> int:
        n = len(states)
        order = [(self.start + i) % n for i in range(n)]
        self.start = (self.start + 1) % n
        return min(order, key=lambda i: states[i].outstanding)  # the first minimum of the scan


ROUTERS: dict[str, type] = {r.name: r for r in (RoundRobin, LeastOutstanding, LeastKv, VllmDp)}


def make_router(name: str) -> Router:
    try:
        return ROUTERS[name]()
    except KeyError:
        raise ValueError(f"unknown router {name!r}; known: {', '.join(ROUTERS)}") from None


__all__ = ["ROUTERS", "InstanceState", "LeastKv", "LeastOutstanding", "RoundRobin", "Router", "VllmDp", "make_router"]
