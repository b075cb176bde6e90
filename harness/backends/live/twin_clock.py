"""How far the in-repo server's real-time twin (executor=realtime) fell behind its own timeline
during a probe, from the self-checks it exports on `GET /metrics` (engines/executors/realtime.py):
sleeps that returned past their deadline (`twin_overrun_seconds_total`) and busy iterations that
began later than one iteration after the previous deadline (`twin_late_start_seconds_total`, time
lost rather than absorbed). Either is the host, not the model: a starved CPU once made a twin's
P50 TTFT 7x the simulator's. Such a run measured the host; the harness says so instead of
letting it pass for the model's latencies. Servers without these counters (vLLM, the torch
executor) are never judged.
"""
from __future__ import annotations

from dataclasses import dataclass

from common.prometheus import samples

PREDICTED, OVERRUN, LATE = ("engine:twin_predicted_seconds_total", "engine:twin_overrun_seconds_total",
                            "engine:twin_late_start_seconds_total")
# Behind by more than this share of the time it modelled: disturbed. Why 2 %: a twin chain that loses
# time near saturation inflates queueing delays several times over what it lost. Measured on the
# live-vs-sim run of tests/test_live_loopback.py (2 cores at load 5, the server SIGSTOPped for a while
# every 2 s): behind 0.7 % of the modelled time -> live/sim P50 TTFT 1.08; 1.6 % -> 1.06; 3.0 % -> 1.14;
# 12 % -> 1.80; 90 % -> 6.95. The test's band for the live path's own overhead is 0.95-1.20.
TOLERANCE = 0.02
DISTURBED = "disturbed:"  # how the note begins, in the probe's notes and its saved stats


@dataclass(frozen=True)
class TwinClock:
    predicted_s: float  # iteration time the twin modelled
    behind_s: float  # time it ran past its own deadlines (overrun + late starts)


def parse_twin(text: str) -> TwinClock | None:
    """The twin's counters, or None where the server keeps none."""
    found = {name: value for name, _, value in samples(text) if name in (PREDICTED, OVERRUN, LATE)}
    if PREDICTED not in found:
        return None
    return TwinClock(found[PREDICTED], found.get(OVERRUN, 0.0) + found.get(LATE, 0.0))


def during(before: TwinClock | None, after: TwinClock | None) -> TwinClock | None:
    if before is None or after is None:
        return None
    return TwinClock(after.predicted_s - before.predicted_s, after.behind_s - before.behind_s)


def disturbance(clock: TwinClock | None, tolerance: float = TOLERANCE) -> str | None:
    """One line when the twin fell behind its timeline by more than `tolerance` of it, else None."""
    if clock is None or clock.behind_s <= tolerance * max(clock.predicted_s, 0.0):
        return None
    share = clock.behind_s / clock.predicted_s if clock.predicted_s > 0 else float("inf")
    return (f"{DISTURBED} the twin ran {clock.behind_s:.3f} s behind its own timeline ({share:.1%} of the "
            f"{clock.predicted_s:.3f} s it modelled, over {tolerance:.0%}): the host held the server back, so these "
            "latencies measure the host, not the model")


def disturbed_note(notes) -> str | None:
    """The note among a run's `notes` that says the host disturbed it, or None: the one reading of
    `disturbance`'s line (the client saves it, the table warns of it, tests judge by it)."""
    return next((n for n in notes if n.startswith(DISTURBED)), None)
