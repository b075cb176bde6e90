"""Disaggregated prefill and decode between servers: the live twin of harness/backends/sim/disagg.py.

A router (engines/server/router.py) sends each request first to a prefill server (role prefill)
with max_tokens=1 and `kv_transfer_params: {"do_remote_decode": true, "max_tokens": n}` (n: the
client's, so that a request too long for the model is refused before any token). That server runs
the prompt under its own scheduler, streams the first token and reports, on its stream's final
event, `kv_transfer_params: {"prompt_tokens": p, "prefill_s": s}` (s: from the first iteration
that ran any of the prompt to the first token). The router then sends the request, with the
client's max_tokens, to a decode server (role decode) with `kv_transfer_params: {"source": i,
"prompt_tokens": p, "prefill_s": s}` (i: which prefill server, in the router's order). The decode
server waits until the prompt's KV has landed, as the real-time twin prices it
(`engines.perf.transfer.KvTransfer` over the link from prefill server i, its lanes, its mode),
adds the request already prefilled (`Sequence.arrive_prefilled`: prompt computed, first token
made) and streams tokens 2..n. This is the shape of vLLM's disaggregated-prefill proxy, where
`kv_transfer_params` carries what its KV connector needs to pull the KV; here nothing moves and
the transfer's price is waited instead.

Transfers from one prefill server into one decode server go one at a time, in the order they
arrive (the simulator's FIFO on a prefill instance's egress link). Not modelled live: several
decode servers sharing one prefill server's egress (each sees only its own transfers), so with
more than one decode instance the twin's transfers can queue less than the simulator's.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from engines.perf.transfer import KvTransfer
from engines.server.errors import ApiError

PARAM = "kv_transfer_params"


def _bad(message: str) -> ApiError:
    return ApiError(400, f"'{PARAM}': {message}", PARAM)


def _int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


@dataclass(frozen=True)
class Prefilled:
    """What a decode server is told about a request prefilled elsewhere."""

    source: int  # which prefill server (the router's order)
    prefill_s: float  # first iteration of the prompt to its first token, on the prefill server


def remote_decode_max_tokens(params: object) -> int | None:
    """A prefill server's request: the client's max_tokens when a decode server will go on
    (`{"do_remote_decode": true, "max_tokens": n}`), None when nobody will."""
    if params is None:
        return None
    if not isinstance(params, dict) or params.get("do_remote_decode") is not True:
        raise _bad(f"a prefill server takes {{\"do_remote_decode\": true, \"max_tokens\": n}}, got {params!r}")
    n = params.get("max_tokens")
    if not _int(n) or n < 1:
        raise _bad(f"'max_tokens' must be an integer >= 1, got {n!r}")
    return n


def parse_prefilled(params: object, prompt_len: int, max_tokens: int, sources: int) -> Prefilled:
    """A decode server's request prefilled elsewhere, checked against its own prompt."""
    if not isinstance(params, dict):
        raise _bad(f"must be an object, got {type(params).__name__}")
    source, prefill_s, prompt_tokens = params.get("source"), params.get("prefill_s"), params.get("prompt_tokens")
    if not _int(source) or source < 0 or (sources > 1 and source >= sources):
        raise _bad(f"'source' must be a prefill server's index in [0, {max(sources, 1)}), got {source!r}")
    if isinstance(prefill_s, bool) or not isinstance(prefill_s, (int, float)) or not math.isfinite(prefill_s) or prefill_s < 0:
        raise _bad(f"'prefill_s' must be a number >= 0, got {prefill_s!r}")
    if prompt_tokens is not None and prompt_tokens != prompt_len:
        raise _bad(f"the prefill server computed {prompt_tokens!r} prompt tokens, this server counts {prompt_len}")
    if max_tokens < 2:
        raise _bad(f"a prefilled request already has its first token; max_tokens must be >= 2, got {max_tokens}")
    return Prefilled(source, float(prefill_s))


class KvIntake:
    """When each prefilled request's KV has landed on this decode server (its clock's seconds).

    `transfers[i]` prices the KV from prefill server i (one entry: from every one); none: the
    KV takes no time (the null executor's world). `time_scale` stretches every transfer as the
    real-time executor stretches every iteration: the transfer formula is made of max and +, so
    pricing at 1/scale of the clock and scaling back is the stretched transfer exactly."""

    def __init__(self, transfers: Sequence[KvTransfer], time_scale: float = 1.0) -> None:
        self.transfers = tuple(transfers)
        self.scale = float(time_scale)
        self._link_free: dict[int, float] = {}

    @property
    def sources(self) -> int:
        return len(self.transfers)

    def lands(self, p: Prefilled, prompt_tokens: int, now: float) -> float:
        """`now`: when the request reached this server, taken as the prefill's end."""
        if not self.transfers:
            return now
        tr = self.transfers[p.source if len(self.transfers) > 1 else 0]
        s = self.scale
        free = self._link_free.get(p.source, -math.inf)
        at = s * tr.arrival(prompt_tokens, (now - p.prefill_s) / s, now / s, free / s)
        self._link_free[p.source] = at
        return at
