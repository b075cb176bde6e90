"""What the load generator takes from a live backend's settings that it also checks itself: the
dispatch-lag verdict's thresholds (`backend.lag`), the APIs it speaks, its connection pool. Here,
below both, so the settings never import the load generator (harness.loadgen re-exports them)."""
from __future__ import annotations

from dataclasses import dataclass

API_PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}  # backend.api -> path
MAX_CONNECTIONS = 4096  # the client's connection pool: one per request in flight


@dataclass(frozen=True)
class LagPolicy:
    quantile: float = 0.99
    warn_s: float = 0.001
    invalid_s: float = 0.010

    def __post_init__(self) -> None:
        if not 0 < self.quantile <= 1:
            raise ValueError(f"lag quantile must be in (0, 1], got {self.quantile}")
        if not 0 <= self.warn_s <= self.invalid_s:
            raise ValueError(f"need 0 <= warn_s <= invalid_s, got {self.warn_s}, {self.invalid_s}")
