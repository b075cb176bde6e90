"""The capacity search in rounds of W probes at once: the serial search (`capacity.find_capacity`),
run ahead speculatively.

The serial search is a sequence of decisions: each probe's verdict picks the next rate (up or
down by `growth`, x2 by default, while bracketing, then the upper or lower half of the bracket). A round probes the W rates
the serial search is most likely to need next, over both verdicts of every probe not yet run: its
next rate, the two it needs after that (one per verdict), and so on, most probable first. Then the
serial search is replayed over every verdict known; it needs a new round only where it reaches a
rate nobody probed. So

- the answer is the serial search's, bit for bit (capacity and bracket), whatever W, even when
  pass/fail is not monotone in the rate; the extra probes only ran ahead;
- the rates are the serial search's own floats (the same steps by `growth` and midpoints), so a parallel
  search and a serial one share their cached probes;
- W = 1 probes exactly what the serial search probes; with W = 2^s - 1 a bisection round probes
  the full depth-s tree of midpoints, a 2^s-section of the bracket, and the search needs about
  1/s of the serial rounds (log_(W+1) of them); other W add part of the next level;
- while bracketing, the direction it is going in is the likely one (`KEEP_GOING`), so a round
  upward probes W geometrically spaced rates (x growth each: 2 unless search.growth says).
"""
from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from harness.search.capacity import CapacityResult, Probe, check_bounds, find_capacity

# Prior odds for ranking speculative probes (they change which rates run ahead, never the answer):
# while every probe so far passed (or every one failed) the search keeps stepping up (down) with
# this probability; in the bisection either half is as likely.
KEEP_GOING = 0.8
# The odds the next probe passes, by the verdicts seen: none (the first rate: pass or fail alike),
# all passed (bracketing upward), all failed (bracketing downward); both seen (bisecting): 0.5.
PASS_ODDS = {frozenset(): 0.5, frozenset({True}): KEEP_GOING, frozenset({False}): 1 - KEEP_GOING}


@dataclass(frozen=True)
class SearchBounds:
    start_qps: float = 1.0
    rel_tol: float = 0.025
    min_qps: float = 1e-3
    max_qps: float = 1e4
    growth: float = 2.0  # the bracket's step (capacity.find_capacity)


@dataclass(frozen=True)
class Round:
    index: int  # 1, 2, ...
    rates: tuple[float, ...]  # probed at once, most likely needed first
    bracket: tuple[float, float]  # the serial search's (highest passing, lowest failing) so far


class _Needs(Exception):
    def __init__(self, qps: float) -> None:
        self.qps = qps


def replay(verdicts: Mapping[float, bool], bounds: SearchBounds) -> float | CapacityResult:
    """The serial search over known verdicts: its result, or the first rate it needs that has none."""

    def probe(qps: float) -> Probe:
        if qps in verdicts:
            return Probe(qps, verdicts[qps])
        raise _Needs(qps)

    try:
        return find_capacity(probe, bounds.start_qps, bounds.rel_tol, bounds.min_qps, bounds.max_qps, growth=bounds.growth)
    except _Needs as e:
        return e.qps


def plan_round(verdicts: Mapping[float, bool], workers: int, bounds: SearchBounds) -> list[float]:
    """The (up to) `workers` rates to probe next, most likely needed first; [] when the serial
    search is done with what is known."""
    heap: list[tuple[float, int, dict[float, bool]]] = [(-1.0, 0, dict(verdicts))]
    chosen: list[float] = []
    pushed = 1
    budget = 64 * workers + 64  # hypothetical states visited at most (each replay is a few probes)
    while heap and len(chosen) < workers and budget > 0:
        budget -= 1
        neg_p, _, hyp = heapq.heappop(heap)
        need = replay(hyp, bounds)
        if isinstance(need, CapacityResult):  # this branch ends the search
            continue
        if need not in chosen:
            chosen.append(need)
        p_pass = PASS_ODDS.get(frozenset(hyp.values()), 0.5)
        for passed, p in ((True, p_pass), (False, 1 - p_pass)):
            heapq.heappush(heap, (neg_p * p, pushed, {**hyp, need: passed}))
            pushed += 1
    return chosen


def bracket(verdicts: Mapping[float, bool]) -> tuple[float, float]:
    """(highest passing rate below the lowest failing one, lowest failing rate) of what is known."""
    hi = min((q for q, ok in verdicts.items() if not ok), default=float("inf"))
    lo = max((q for q, ok in verdicts.items() if ok and q < hi), default=0.0)
    return lo, hi


def find_capacity_rounds(
    probe_round: Callable[[Sequence[float]], Iterable[Probe]], workers: int, bounds: SearchBounds = SearchBounds(),
    on_probe: Callable[[Probe], None] | None = None, on_round: Callable[[Round], None] | None = None,
) -> CapacityResult:
    """The serial search's answer, probing up to `workers` rates per round through `probe_round`
    (which yields one `Probe` per rate, in any order, as each finishes: `on_probe` sees them so).
    The result's probes are in the order planned, round by round."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    check_bounds(bounds.start_qps, bounds.rel_tol, bounds.min_qps, bounds.max_qps)
    ran: dict[float, Probe] = {}
    rounds = 0
    while True:
        verdicts = {q: p.passed for q, p in ran.items()}
        rates = plan_round(verdicts, workers, bounds)
        if not rates:
            break
        rounds += 1
        if on_round is not None:
            on_round(Round(rounds, tuple(rates), bracket(verdicts)))
        done: dict[float, Probe] = {}
        results = probe_round(rates)
        try:
            for p in results:  # as each finishes
                if p.qps not in rates or p.qps in done:
                    raise RuntimeError(f"probe_round returned {p.qps!r}, not one of this round's rates {rates}")
                done[p.qps] = p
                if on_probe is not None:
                    on_probe(p)
        finally:
            close = getattr(results, "close", None)
            if close is not None:  # a generator left early (an interrupt): let it cancel what is pending
                close()
        missing = [q for q in rates if q not in done]
        if missing:
            raise RuntimeError(f"probe_round returned no probe for {missing}")
        ran.update((q, done[q]) for q in rates)  # kept in the round's order, whichever finished first
    final = replay({q: p.passed for q, p in ran.items()}, bounds)
    assert isinstance(final, CapacityResult)
    return CapacityResult(final.capacity_qps, final.lowest_failing_qps, tuple(ran.values()), rounds=rounds)
