"""Requests as plain tuples, for a process boundary (partition.py: a replica's requests going to a worker).

`RequestSpec` is a frozen dataclass with slots: pickle takes each one apart and puts it back
together through the dataclass's own Python-level `__getstate__` and `__setstate__`, some 4 to 18 us
a request each way on this host, where a fleet's day ships millions. A tuple of its fields pickles
in C (about 1.1 us out, 1.3 back, 0.3 to take the fields and 0.9 to build the request again).
Every field goes as it is (ints, floats, None, the segments' tuples): the requests come back equal,
field for field and type for type (tests/test_sim_partition.py).
"""
from __future__ import annotations

from dataclasses import fields
from operator import attrgetter

from harness.records import RequestSpec

_FIELDS = attrgetter(*(f.name for f in fields(RequestSpec)))  # in the constructor's order


def to_rows(requests) -> list[tuple]:
    return list(map(_FIELDS, requests))


def from_rows(rows: list[tuple]) -> list[RequestSpec]:
    return [RequestSpec(*row) for row in rows]
