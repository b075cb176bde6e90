"""Cache-aware routers: a request goes where its prompt's KV is likely cached.

  session_affinity  consistent hashing of the request's session (a conversation's or agent's id)
                    onto a ring of `virtual_nodes` points per instance: every turn of a session
                    goes to one instance, and adding an instance moves only the sessions its
                    points take (about 1/(n+1) of them). A request without a session: fewest
                    outstanding (`without_session=round_robin`: the next instance in turn,
                    so no choice reads instance state).
  prefix_aware      prefix overlap as a router without cache visibility estimates it: an index,
                    per instance, of the block hashes the router has sent there (LRU, at most
                    `index_blocks` per instance: its stand-in for the instance's eviction).
  prefix_exact      prefix overlap read from each instance's own cache (`InstanceState.cached_blocks`,
                    which the caller fills in from the engine's block hashes).

The two prefix routers combine overlap with load by one rule (`pick`), the rule of SGLang's
cache-aware router: if the load is out of balance, i.e. the most and fewest requests outstanding
differ by more than `balance_abs_threshold` AND the most is over `balance_rel_threshold` times the
fewest, the request goes to the instance with the fewest outstanding; otherwise to the instance
matching the longest run of the prompt's leading blocks (ties: fewer outstanding, then lower
index), provided that run is over `cache_threshold` of the prompt's full blocks; otherwise (little
to win from any cache) to the fewest outstanding. SGLang sends that last case to the instance with
the smallest tree instead; fewest outstanding is this harness's choice (the exact router has no
tree to measure). A prompt with no full block (or unknown tokens) goes by load.

Each router counts its decisions by branch (`decisions`: balance, cache, load) for the reports.
"""
from __future__ import annotations

import hashlib
import math
from bisect import bisect_right
from collections import OrderedDict

from engines.routers import InstanceState, RouteRequest, least_outstanding

BRANCHES = ("balance", "cache", "load")
WITHOUT_SESSION = ("least_outstanding", "round_robin")  # session_affinity: where a request without a session goes


def stable_hash(key: str) -> int:
    """A 64-bit hash of `key`, the same in every process (Python's str hash is salted per process:
    the simulator and the live router must place a session alike)."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big")


def _int_knob(name: str, value: object, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"router knob {name} must be an integer >= {low}, got {value!r}")
    return value


def _real_knob(name: str, value: object, low: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < low:
        raise ValueError(f"router knob {name} must be a number >= {low:g}, got {value!r}")
    return float(value)


class SessionAffinity:
    name = "session_affinity"
    needs_state = True  # requests without a session go by load
    needs_request = True
    needs_cache = False

    def __init__(self, virtual_nodes: int = 64, without_session: str = "least_outstanding") -> None:
        self.virtual_nodes = _int_knob("virtual_nodes", virtual_nodes, 1)
        if without_session not in WITHOUT_SESSION:
            raise ValueError(f"router knob without_session must be one of {', '.join(WITHOUT_SESSION)}, "
                             f"got {without_session!r}")
        # round_robin: a request without a session goes to the next instance in turn, whatever the
        # load, so no choice reads instance state (a simulator may then run the instances apart).
        self.without_session = without_session
        self.turn = 0
        # (key, points, owners): the ring of the last set of instances (key: their count, or their
        # ids where they have ids), owners as positions among them
        self._ring: tuple[int | tuple[int, ...], list[int], list[int]] = (0, [], [])

    def ring(self, n: int, members: tuple[int, ...] | None = None) -> tuple[list[int], list[int]]:
        """The ring's points in order and the position of the instance owning each, among `n`
        instances with ids `members` (default 0..n-1); cached per set."""
        key = n if members is None else members
        if self._ring[0] != key:
            ids = range(n) if members is None else members
            pts = sorted((stable_hash(f"instance {m} point {v}"), i) for i, m in enumerate(ids)
                         for v in range(self.virtual_nodes))
            self._ring = (key, [p for p, _ in pts], [i for _, i in pts])
        return self._ring[1], self._ring[2]

    def owner(self, session: str, n: int, members: tuple[int, ...] | None = None) -> int:
        """The instance of `session` among `n` (ids `members`, default 0..n-1): the first point at
        or after its hash, clockwise; returned as its position among the n."""
        points, owners = self.ring(n, members)
        return owners[bisect_right(points, stable_hash(session)) % len(points)]

    def choose(self, states: list[InstanceState], request: RouteRequest | None = None) -> int:
        members = tuple(s.instance_id for s in states) if states and states[0].instance_id is not None else None
        choice = self.static_choice(request or RouteRequest(), len(states), members)
        return least_outstanding(states) if choice is None else choice

    def static_choice(self, request: RouteRequest, n: int, members: tuple[int, ...] | None = None) -> int | None:
        """The instance `choose` gives `request` among `n` whatever their state (its session's
        owner, or with without_session=round_robin the next in turn), or None when the state
        decides: lets a simulator route ahead, calling it in the order `choose` would be called."""
        if request.session is not None:
            return self.owner(request.session, n, members)
        if self.without_session == "least_outstanding":
            return None
        i = self.turn % n
        self.turn = i + 1
        return i


def pick(states: list[InstanceState], matched: list[int], total: int, balance_abs: float, balance_rel: float,
         cache_threshold: float) -> tuple[int, str]:
    """The module docstring's rule: (instance, branch), `matched[i]` being the leading blocks of
    the prompt's `total` full blocks that instance i holds."""
    loads = [s.outstanding for s in states]
    lo, hi = min(loads), max(loads)
    if hi - lo > balance_abs and hi > balance_rel * lo:
        return least_outstanding(states), "balance"
    best = min(range(len(states)), key=lambda i: (-matched[i], loads[i], i))
    if total and matched[best] and matched[best] / total > cache_threshold:
        return best, "cache"
    return least_outstanding(states), "load"


class _PrefixRule:
    needs_state = True
    needs_request = True

    def __init__(self, balance_abs_threshold: int = 64, balance_rel_threshold: float = 1.5,
                 cache_threshold: float = 0.3) -> None:
        self.balance_abs = _int_knob("balance_abs_threshold", balance_abs_threshold, 0)
        self.balance_rel = _real_knob("balance_rel_threshold", balance_rel_threshold, 1.0)
        self.cache_threshold = _real_knob("cache_threshold", cache_threshold, 0.0)
        if self.cache_threshold >= 1:
            raise ValueError(f"router knob cache_threshold must be < 1 (a share of the prompt's blocks), "
                             f"got {cache_threshold!r}")
        self.decisions = dict.fromkeys(BRANCHES, 0)

    def matched(self, states: list[InstanceState], hashes: tuple[int, ...]) -> list[int]:
        raise NotImplementedError

    def choose(self, states: list[InstanceState], request: RouteRequest | None = None) -> int:
        hashes = request.block_hashes if request is not None else ()
        k, branch = pick(states, self.matched(states, hashes), len(hashes), self.balance_abs, self.balance_rel,
                         self.cache_threshold)
        self.decisions[branch] += 1
        self.routed(k, hashes, states)
        return k

    def routed(self, k: int, hashes: tuple[int, ...], states: list[InstanceState]) -> None:
        """What the router remembers of sending `hashes` to instance k of `states` (nothing by default)."""


class PrefixExact(_PrefixRule):
    name = "prefix_exact"
    needs_cache = True

    def matched(self, states: list[InstanceState], hashes: tuple[int, ...]) -> list[int]:
        return [min(s.cached_blocks, len(hashes)) for s in states]


class PrefixAware(_PrefixRule):
    name = "prefix_aware"
    needs_cache = False

    def __init__(self, balance_abs_threshold: int = 64, balance_rel_threshold: float = 1.5,
                 cache_threshold: float = 0.3, index_blocks: int = 1 << 20) -> None:
        super().__init__(balance_abs_threshold, balance_rel_threshold, cache_threshold)
        self.index_blocks = _int_knob("index_blocks", index_blocks, 1)
        # per instance (its id where it has one, an autoscaled fleet's replica; else its position):
        # the hashes sent there, least recently sent first
        self.index: dict[int, OrderedDict[int, None]] = {}

    def _index(self, states: list[InstanceState], i: int) -> OrderedDict[int, None]:
        key = states[i].instance_id
        key = i if key is None else key
        idx = self.index.get(key)
        if idx is None:  # (not setdefault: it would build an OrderedDict on every call)
            idx = self.index[key] = OrderedDict()
        return idx

    def matched(self, states: list[InstanceState], hashes: tuple[int, ...]) -> list[int]:
        out = []
        for i in range(len(states)):
            idx = self._index(states, i)
            n = 0
            for h in hashes:  # the leading run: a block's hash chains every block before it
                if h not in idx:
                    break
                n += 1
            out.append(n)
        return out

    def routed(self, k: int, hashes: tuple[int, ...], states: list[InstanceState]) -> None:
        idx = self._index(states, k)
        for h in hashes:
            idx[h] = None
            idx.move_to_end(h)
        while len(idx) > self.index_blocks:
            idx.popitem(last=False)
