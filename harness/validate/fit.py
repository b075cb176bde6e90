"""Fitting a calibration (engines/perf/calibration.py) to one measured run.

The run is split by request, not by time: a `share` of the requests (every other one at 0.5),
spread evenly over the run in arrival order, are the fit's; the rest are held out. Every
evaluation replays the whole stream, so each request queues behind everything that really came
before it (a fit that replayed only the run's first half saw none of the second half's queueing,
and could "fix" a KV-capacity mismatch by trading prefill speed against decode speed). The fit
minimises the squared log-ratio of sim to real over the HEADLINE statistics (mean, P50, P90 of
TTFT, TPOT and E2E) of its requests; the held-out error is measured on the others, in the same
replay with the fitted factors. Where TTFT and TPOT err in opposite directions, the mismatch is
in capacity (KV, admission), not speed: the fit says so (compare.capacity_mismatch).

The search is a bounded multiplicative pattern search from the model's own numbers, moving one
factor or a pair of them at a time (`_moves`): it respects the bounds exactly and needs no
optimiser library at run time (scipy is a development tool here). It runs twice, with steps
shrinking from x8 and from x2 (`SCHEDULES`), and keeps the better fit of the fitted requests: the
objective has long curved valleys (FLOP/s and bandwidth both set a step's time), where a first jump
of x8 can land in a far arm and stay there (a run made at FLOP/s x0.6 and bandwidth x0.4: fitted
x1.14 and x0.15, held-out error 17 %; from x2, 5 %), while steps of x2 climb too slowly for a CPU
cost that starts at 0 (from its floor, 10 doublings: the scales took its share first).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from engines.perf.calibration import FACTORS, Calibration

from .compare import HEADLINE, Comparison, capacity_mismatch, compare
from .replay import Target, replay
from .runfile import MeasuredRun

# (step sizes, sweeps per step size at most): from x8, 4 sweeps (a factor far from its start moves
# x8 a sweep); from x2, 16 (the model's numbers to x0.01 is 7 doublings, a CPU cost from its floor 10).
SCHEDULES = (((8.0, 4.0, 2.0, 1.41, 1.19, 1.09, 1.05), 4), ((2.0, 1.41, 1.19, 1.09, 1.05), 16))
IDENTIFY_STEP = 2.0  # a factor the run identifies moves some statistic when doubled or halved
CPU_PROBE_S = 1e-3  # a millisecond more per iteration or per sequence, to tell step_cpu_s from seq_cpu_s
SAME_S = 1e-9  # statistics this close (seconds) are the same: float rounding of equal schedules
# The smallest non-zero CPU cost a step reaches from 0 (then multiplied up): 10 us, 1 us per sequence.
_FLOOR = {"step_cpu_s": 1e-5, "seq_cpu_s": 1e-6}


@dataclass(frozen=True)
class Fit:
    calibration: Calibration
    before_fit: Comparison  # the fitted requests, uncalibrated
    fit: Comparison  # the same, calibrated
    before_held_out: Comparison  # the held-out requests, uncalibrated
    held_out: Comparison  # the same, calibrated
    evaluations: int
    warnings: tuple[str, ...] = ()  # what the comparisons say the factors cannot fix (capacity_mismatch)


def split(run: MeasuredRun, share: float) -> tuple[list[int], list[int]]:
    """(fitted, held-out) indices into the run's records: `share` of the requests, spread evenly
    over the run in arrival order (request k of the order is fitted when floor((k+1) share) >
    floor(k share): every other one at 0.5), so both parts see every phase of the run's load."""
    order = sorted(range(len(run.records)), key=lambda i: (run.records[i].arrival_s, i))
    fitted = [i for k, i in enumerate(order) if math.floor((k + 1) * share) > math.floor(k * share)]
    chosen = set(fitted)
    return sorted(fitted), [i for i in range(len(run.records)) if i not in chosen]


def loss(c: Comparison) -> float:
    terms = [math.log(r.sim / r.real) ** 2 for r in c.rows if r.key in HEADLINE and r.real > 0 and r.sim > 0]
    unfinished = c.dropped_sim / max(1, c.compared + c.dropped_sim)
    return (sum(terms) / len(terms) if terms else math.inf) + 10.0 * unfinished


def _moves(factors: Sequence[str]) -> list[tuple[tuple[str, int], ...]]:
    """The search's directions: each factor up or down alone, then each pair together, the same way
    or opposite ways. Two speeds that trade against each other (FLOP/s and bandwidth both set a
    step's time) leave a diagonal valley in which no single factor's move improves: a coordinate
    search stops at its wall (seen: a run made at FLOP/s x0.6 and bandwidth x0.4 fitted to x1.77
    and x0.14, loss 0.0055 where the truth's is 0). The pairs walk along it."""
    single = [((f, sign),) for f in factors for sign in (1, -1)]
    pairs = [((a, sa), (b, sb)) for i, a in enumerate(factors) for b in factors[i + 1:] for sa in (1, -1) for sb in (1, -1)]
    return single + pairs


def _search(score, x: dict[str, float], factors: Sequence[str], steps: Sequence[float],
            sweeps: int) -> tuple[float, dict[str, float]]:
    """A bounded multiplicative pattern search from `x`: (its best score, where)."""
    x = {k: _clip(k, v) for k, v in x.items()}
    best = score(x)
    moves = _moves(factors)
    for step in steps:
        for _ in range(sweeps):
            moved = False
            for move in moves:
                cand = x | {name: _clip(name, (x[name] if x[name] > 0 else _FLOOR.get(name, 0.0)) * step ** sign)
                            for name, sign in move}
                if cand != x and (value := score(cand)) < best - 1e-12:
                    best, x, moved = value, cand, True
            if not moved:
                break
    return best, x


def unidentified(stats, x: dict[str, float], factors: Sequence[str]) -> tuple[list[str], str]:
    """The factors the run says nothing about, by `stats(params)` (the fitted window's headline
    statistics as simulated): one that moves none of them when doubled or halved from the fit (a term
    no iteration of the run pays); or seq_cpu_s when a millisecond more of it or of step_cpu_s gives
    the same statistics (every iteration ran one sequence: step_cpu_s alone takes both). A value the
    run cannot see would be the search's start, printed as if measured and carried into every
    prediction made with the file. Returns (those factors, why)."""
    here = stats(x)

    def same(a: np.ndarray, b: np.ndarray) -> bool:
        return bool(np.allclose(a, b, rtol=0.0, atol=SAME_S, equal_nan=True))

    flat = []
    for name in factors:
        at = max(x[name], _FLOOR.get(name, 0.0))  # a CPU cost fitted to ~0 is probed from the search's floor
        moved = [v for v in (_clip(name, at * IDENTIFY_STEP), _clip(name, at / IDENTIFY_STEP)) if v != x[name]]
        if all(same(stats(x | {name: v}), here) for v in moved):
            flat.append(name)
    if flat:
        return flat, (f"moving {'it' if len(flat) == 1 else 'each'} x{IDENTIFY_STEP:g} either way from the fit "
                      "changes no statistic compared")
    cpu = ("step_cpu_s", "seq_cpu_s")
    if all(f in factors for f in cpu):
        up = min([CPU_PROBE_S] + [FACTORS[f][2] - x[f] for f in cpu])  # within both bounds
        d = up if up > 0 else -min([CPU_PROBE_S] + [x[f] for f in cpu])
        step, seq = (x | {f: x[f] + d} for f in cpu)
        if d != 0 and same(stats(step), stats(seq)):
            return ["seq_cpu_s"], ("it cannot be told from step_cpu_s: a millisecond more of either gives the same "
                                   "statistics (every iteration ran one sequence)")
    return [], ""


def _clip(name: str, v: float) -> float:
    _, lo, hi = FACTORS[name]
    return min(hi, max(lo, v))


def _part(run: MeasuredRun, sim: Sequence, indices: Sequence[int]) -> Comparison:
    """The comparison of the requests `indices` names, from one replay `sim` of the whole run."""
    return compare([run.records[i] for i in indices], [sim[i] for i in indices], 0, run.per_token)


def calibrate(run: MeasuredRun, target: Target, window: float = 0.5, factors: Sequence[str] = tuple(FACTORS)) -> Fit:
    """Fit `factors` on `window` (a share) of the run's requests; see the module's docstring."""
    fitted, held = split(run, window)
    if len(fitted) < 8 or not held:
        raise ValueError(f"window={window}: {len(fitted)} of {len(run.records)} requests to fit on; "
                         f"need at least 8 and some held out")

    def whole(params: dict[str, float] | None) -> list:
        return replay(target, run.records, None if params is None else Calibration(params, 0.0))

    def score(params: dict[str, float]) -> float:
        nonlocal evals
        evals += 1
        return loss(_part(run, whole(params), fitted))

    def stats(params: dict[str, float]) -> np.ndarray:
        c = _part(run, whole(params), fitted)
        return np.array([r.sim for r in c.rows if r.key in HEADLINE] + [c.dropped_sim], float)

    evals, d = 0, target.base
    start = {"flops_scale": 1.0, "bandwidth_scale": 1.0, "step_cpu_s": d.cpu_overhead_s, "seq_cpu_s": d.cpu_overhead_per_seq_s}
    # From the model's own numbers, taking each move that improves as it comes, under each schedule;
    # the better fit of the fitted requests wins (ties: the first). (With the run's first half fitted
    # and its second held out, a better fit of the first half was seen to predict the second worse on
    # the H200 run, 20 -> 37-51 %: the engine's load differed between the halves. The requests
    # fitted now are spread over the run, beside the held-out ones.)
    _, x = min((_search(score, start, factors, steps, sweeps) for steps, sweeps in SCHEDULES),
               key=lambda found: found[0])
    blind, why = unidentified(stats, x, factors)
    if blind:
        rest = [f for f in factors if f not in blind]
        raise ValueError(f"this run cannot identify {' and '.join(blind)}: {why}; fit "
                         f"{'--factors ' + ','.join(rest) if rest else 'on a run that exercises them'}")
    calibrated, uncalibrated = whole(x), whole(None)
    fit_cmp, held_cmp = _part(run, calibrated, fitted), _part(run, calibrated, held)
    before_fit, before_held = _part(run, uncalibrated, fitted), _part(run, uncalibrated, held)
    cal = Calibration(factors={k: x[k] for k in factors}, held_out_error=held_cmp.headline_error(), source=str(run.path),
                      fitted_on=f"{len(fitted)} of {len(run.records)} requests, spread over the run by arrival "
                                f"(the whole stream replayed); held out: the other {len(held)}",
                      held_out=held_cmp.signed(), fit_error=fit_cmp.headline_error(),
                      device=(target.base.gpu.name, target.base.gpu.peak_flops, target.base.gpu.hbm_bandwidth))
    warnings = tuple(w for c, when in ((before_held, "uncalibrated"), (held_cmp, "calibrated"))
                     if (w := capacity_mismatch(c, when)))
    return Fit(cal, before_fit, fit_cmp, before_held, held_cmp, evals, warnings)
