"""Prometheus text exposition, read: the samples of `GET /metrics`. The harness reads servers'
prefix-cache counters with it (harness/backends/live/prometheus.py), the in-repo router its
replicas' (engines/server/router/fleet.py)."""
from __future__ import annotations

import re
from collections.abc import Iterator

_LINE = re.compile(r"^(?P<name>[a-zA-Z_:][\w:]*)(?P<labels>\{[^}]*\})?\s+(?P<value>\S+)")


def samples(text: str) -> Iterator[tuple[str, str, float]]:
    """(name, labels as written, e.g. '{model_name="m"}' or '', value) of every sample line."""
    for line in text.splitlines():
        m = _LINE.match(line)
        if m:
            try:
                yield m.group("name"), m.group("labels") or "", float(m.group("value"))
            except ValueError:
                continue
