"""What the load generator takes from any live backend's settings (`backend=live` or `endpoint`)."""
from __future__ import annotations

from dataclasses import dataclass, field

from harness.settings.backend import BackendSettings
from harness.settings.load import MAX_CONNECTIONS, LagPolicy


@dataclass(frozen=True)
class ClientSettings(BackendSettings):
    request_timeout_s: float = 600.0  # per request, connect to last byte
    stall_timeout_s: float | None = 30.0  # a stream silent this long after its first bytes is cut (null: off)
    strict: bool = True  # a probe whose dispatch lag is "invalid" breaks the run instead of being used
    lag: LagPolicy = field(default_factory=LagPolicy)  # dispatch lag (actual - planned send) verdicts
    # SCHED_FIFO for the client's threads: steadier dispatch on a busy host. null: wherever the
    # process may have it (root or CAP_SYS_NICE; the run says which); true: asked for; false: never.
    client_realtime_priority: bool | None = None
    health_timeout_s: float = 15.0  # a server whose /health answers nothing for this long breaks the run (0: off)
    # At most this many requests in flight; past it the probe is the client's saturation.
    max_connections: int = MAX_CONNECTIONS
