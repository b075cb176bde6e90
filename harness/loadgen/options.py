"""How a load-generation run talks to its server, as one frozen value."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from harness.loadgen.validity import LagPolicy
from harness.records import RequestSpec
from harness.settings.load import API_PATHS, MAX_CONNECTIONS


@dataclass(frozen=True)
class LoadOptions:
    base_url: str = ""  # e.g. http://127.0.0.1:8000 (a live backend's run sets it, and model, from its endpoint)
    model: str = ""
    api: str = "completions"  # completions (/v1/completions) | chat (/v1/chat/completions: text prompts only)
    request_timeout_s: float = 600.0  # per request, connect to last byte
    connect_timeout_s: float = 10.0
    time_limit_s: float | None = None  # stop the run here; unfinished requests are recorded, not dropped
    drain_s: float | None = None  # open loop without time_limit_s: stop this long after the last planned arrival
    concurrency: int | None = None  # closed loop: at most this many in flight, arrival times ignored
    ignore_eos: bool = True  # benchmarks generate exactly output_len tokens
    temperature: float = 0.0
    # Ask for usage on every chunk (vLLM and our server support it)? None: only when needed, i.e.
    # when a short stream before the run shows that the server does not name each event's tokens.
    continuous_usage: bool | None = None
    # At most this many connections at once (one per request in flight): past it requests wait,
    # and the run's verdict says the client was saturated rather than blaming the server.
    max_connections: int = MAX_CONNECTIONS
    # Are the server's CLOCK_MONOTONIC times comparable with ours? None: yes iff the host is loopback.
    same_clock: bool | None = None
    lag: LagPolicy = field(default_factory=LagPolicy)
    # Run the client's event loop and pacer threads under SCHED_FIFO (needs root or CAP_SYS_NICE).
    # On a host shared with other busy processes, the kernel may otherwise let a woken thread wait
    # milliseconds for a core: that, not the client, is then the P99 dispatch lag. Children never
    # inherit it (SCHED_RESET_ON_FORK). None: wherever the process may have it (the default);
    # True: asked for, a warning where it may not; False: never.
    realtime_priority: bool | None = None
    # Stop the run once more than this share of its requests failed (not counting a time limit's
    # cut-off): the probe's error fraction is then certain to pass its limit. None or >= 1: never.
    max_error_fraction: float | None = None
    # A stream silent this long after its first body bytes is cut as stalled (an error of kind
    # timeout): a server that never ends a stream does not hold the run for request_timeout_s.
    stall_timeout_s: float | None = None
    progress: bool = True
    progress_desc: str = "requests"
    extra_body: tuple[tuple[str, object], ...] = ()  # extra JSON fields for every request
    api_key: str | None = field(default=None, repr=False)  # sent as `Authorization: Bearer KEY`
    # Polled every `abort_poll_s` during the run: a reason (e.g. "server exited with status -9")
    # stops the run at once; requests not finished are recorded as aborted, never dropped.
    abort_check: Callable[[], str | None] | None = field(default=None, compare=False)
    abort_poll_s: float = 0.25
    # Sessions (harness/loadgen/sessions.py): a later turn's prompt token ids, built when it is
    # released from its spec and the ids the server generated for the turn before (None: unnamed).
    session_prompt: Callable[[RequestSpec, list[int] | None], tuple[int, ...]] | None = field(default=None, compare=False)
    # The live backend's own (harness/backends/live/client.py): the seed of the prompt token ids it
    # draws, and whether an invalid dispatch verdict raises instead of returning suspect records.
    seed: int = 0
    strict: bool = True

    def __post_init__(self) -> None:
        if self.concurrency is not None and self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")
        if self.api not in API_PATHS:
            raise ValueError(f"api must be one of {', '.join(API_PATHS)}, got {self.api!r}")
        if self.max_connections < 1:
            raise ValueError(f"max_connections must be >= 1, got {self.max_connections}")
        if not self.request_timeout_s > 0:
            raise ValueError(f"request_timeout_s must be > 0, got {self.request_timeout_s}")
        if self.stall_timeout_s is not None and not self.stall_timeout_s > 0:
            raise ValueError(f"stall_timeout_s must be > 0 (or None: off), got {self.stall_timeout_s}")
