"""The plan's search: every candidate's capacity, cheaply where it cannot win, exactly where it can.

1. Bounds (`bounds`): a candidate whose upper bound cannot reach the rate it needs to rank with
   the best screened so far is skipped without a probe.
2. Screen: each remaining candidate's capacity with `plan.screen_requests` requests per probe and
   a coarse bracket (`plan.screen_rel_tol`), in waves of candidates at once on the executor
   (`search.executor`: a local pool or Ray), best bounds first. A candidate's search starts at
   the rate it needs to compete (`replicas.competitive_rate`, less `plan.margin` for a short
   probe's optimism) and stops there if it fails it: one probe says it cannot win. It is
   warm-started from its nearest screened neighbour (same deployment and policy, the closest
   knob; else the same policy elsewhere), scaled by the ratio of their bounds, stepping by 1.25
   instead of doubling.
3. Refine: the best screened candidates (`plan.refine_top`, and the best of each policy, P/D
   units apart: `Candidate.family`) get the
   full search (search.num_requests, search.rel_tol), warm-started from their screened capacity.
4. At the target: one full probe per refined candidate at a replica's share of the target.

Probes are not stopped inside a run: the simulator's loop has no hook for it (harness/backends/sim
is not the planner's to change), so the cheap first pass is what saves the time.
"""
from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from common.errors import HarnessError
from harness.planner.bounds import Bound, capacity_bound, data_parallel_bound, decode_limit_s, single_decode_s, ttft_floors_s
from harness.planner.replicas import competitive_rate, rank_key, replicas_needed
from harness.planner.settings import PlanSettings
from harness.planner.space import Candidate, Space
from harness.planner.tasks import ProbeSummary, SearchAnswer, SearchTask, run_rate_task, run_search_task
from harness.search.executor import LocalProcessPool, open_executor
from harness.experiment import ExperimentPlan
from harness.search.probe import ProbeTask
from harness.workload import load_workload

WARM_GROWTH = 1.25  # bracket steps of a warm-started search (a cold one doubles)
REFINE_GROWTH = 1.15


@dataclass
class Evaluation:
    """What the plan learned of one candidate."""

    candidate: Candidate
    bound: Bound
    status: str = "pending"  # pruned (bound), eliminated (failed the competitive rate), screened, refined
    needed_qps: float | None = None  # the rate it had to pass to stay in the running
    screen: SearchAnswer | None = None
    full: SearchAnswer | None = None
    at_target: ProbeSummary | None = None
    warm_from: str | None = None

    @property
    def capacity_qps(self) -> float:
        """The best-known capacity: the full search's, else the screen's."""
        best = self.full or self.screen
        return best.capacity_qps if best is not None else 0.0


@dataclass
class PlanRun:
    space: Space
    settings: PlanSettings
    evaluations: list[Evaluation]
    probes_screen: int = 0
    probes_full: int = 0
    waves: int = 0
    screen_requests: int = 0  # requests per screening probe
    notes: list[str] = field(default_factory=list)


def fidelity(plan: ExperimentPlan, num_requests: int) -> ExperimentPlan:
    """`plan` with `num_requests` requests a probe (the same dataset, seed and everything else)."""
    if num_requests == plan.search.num_requests:
        return plan
    return replace(plan, search=replace(plan.search, num_requests=num_requests),
                   workload=load_workload(plan.dataset, num_requests, plan.seed))


def bound_of(space: Space, c: Candidate) -> Bound:
    plan = space.plan_of(c)
    if c.dp > 1:
        return data_parallel_bound(plan, c.scheduler)
    return capacity_bound(plan, c.scheduler, c.unit.prefill, c.unit.decode) if c.unit else capacity_bound(plan, c.scheduler)


def check_slo_reachable(space: Space) -> None:
    """An SLO that no configuration can meet, by the performance model alone, is bad input: a
    decode limit below every deployment's fastest decode; a TTFT limit that too few of the
    workload's prompts can meet even prefilled alone on the fastest deployment."""
    fastest = {key: single_decode_s(p) for key, p in space.plans.items()}
    (tp, pp, *_), best = min(fastest.items(), key=lambda kv: kv[1])
    plan = next(iter(space.plans.values()))
    limit = decode_limit_s(plan)
    if limit < best:
        name = "slo.tbt_s" if limit == plan.slo.tbt_s else "slo.tpot_s"
        raise HarnessError(f"{name}={limit:g} is below the fastest single decode on {plan.deployment.gpu} ({best:.4f} s: "
                           f"one sequence, tp={tp} pp={pp}): no configuration can meet it; a looser SLO: {name} >= {_up(best):g}")
    slo = plan.slo
    if slo.ttft_s is None:
        return
    # TTFT <= slo.ttft_s for `attainment` of the requests (or at the TTFT quantile, as metrics.check_slo
    # takes it), judged on each request's least TTFT (bounds.ttft_floors_s) on the deployment that prefills fastest.
    floors = {key: ttft_floors_s(p) for key, p in space.plans.items()}
    (tp, pp, *_), least = min(floors.items(), key=lambda kv: float(np.sum(kv[1])))  # one factor a deployment
    if slo.criterion == "attainment":
        need, what = slo.attainment, "slo.attainment"
        reachable = float(np.sort(least)[math.ceil(need * len(least) - 1e-9) - 1])
    else:
        need, what = slo.ttft_quantile, f"the P{slo.ttft_quantile * 100:g} TTFT"
        reachable = float(np.quantile(least, need, method="higher"))
    if slo.ttft_s < reachable:
        share = float(np.mean(least <= slo.ttft_s))
        raise HarnessError(
            f"slo.ttft_s={slo.ttft_s:g} is out of reach: even prefilled alone on the fastest deployment (tp={tp} pp={pp}) "
            f"only {share:.1%} of the requests could have their first token within it, where {what} needs {need:.0%}; "
            f"a looser SLO: slo.ttft_s >= {_up(reachable):g}")


def _up(x: float) -> float:
    """`x` to three significant digits, rounded up: a limit suggested as looser must be."""
    step = 10.0 ** (math.floor(math.log10(x)) - 2)
    return round(math.ceil(x / step - 1e-9) * step, 12)


def _task(e: Evaluation, plan: ExperimentPlan, done: Sequence[Evaluation], s: PlanSettings, floor: float,
          ceiling: float) -> SearchTask:
    c = e.candidate  # warm-started from the screened candidate nearest it in the same policy: same deployment
    # first, then the closest knob, then the closest replica size

    def distance(x: Evaluation) -> tuple:
        o = x.candidate
        return (o.deployment != c.deployment, abs(math.log(o.knob / c.knob)), abs(math.log(o.gpus / c.gpus)), o.pp != c.pp,
                o.key)

    same = [x for x in done if x.screen is not None and x.screen.capacity_qps > 0 and x.candidate.family == c.family]
    n = min(same, key=distance) if same else None
    if n is not None:
        guess, growth = n.screen.capacity_qps * e.bound.estimate_qps / max(n.bound.estimate_qps, 1e-12), WARM_GROWTH
        e.warm_from = n.candidate.key
    else:
        guess, growth = max(e.bound.estimate_qps, floor), 2.0
    start = min(max(guess, floor), ceiling)
    return SearchTask(plan, e.candidate.scheduler, start, floor, ceiling, s.screen_rel_tol, growth)


def _best_screened(evals: Sequence[Evaluation], target: float | None) -> Evaluation | None:
    pool = [e for e in evals if e.screen is not None]
    scored = [(rank_key(target, e.screen.capacity_qps, e.candidate.gpus), i, e) for i, e in enumerate(pool)]
    scored = [t for t in scored if t[0][0] != math.inf]
    return min(scored)[2] if scored else None


def _ratios(evals: Sequence[Evaluation]) -> dict[tuple, float]:
    """Capacity-to-estimate ratios seen so far (bounds.Bound.estimate_qps), by (policy, deployment, knob octave), (policy, knob
    octave) and (policy,): the mean of each."""
    sums: dict[tuple, list[float]] = {}
    for x in evals:
        if x.screen is not None and x.bound.estimate_qps > 0:
            c, r = x.candidate, x.screen.capacity_qps / x.bound.estimate_qps
            octave = round(math.log2(c.knob))
            for key in ((c.family, c.deployment, octave), (c.family, octave), (c.family,)):
                sums.setdefault(key, []).append(r)
    return {k: sum(v) / len(v) for k, v in sums.items()}


def _expected(e: Evaluation, ratios: dict[tuple, float], target: float | None) -> tuple:
    """Screening order: the rank the candidate's bound would give at the capacity-to-bound ratio
    its nearest screened neighbours showed (same policy: a budget too large for a strict SLO, or
    vLLM's stalls, show there first), 1 while its policy has none, so strong candidates come first
    and raise the bar for the rest."""
    c = e.candidate
    octave = round(math.log2(c.knob))
    ratio = next((ratios[k] for k in ((c.family, c.deployment, octave), (c.family, octave), (c.family,)) if k in ratios),
                 1.0)
    return (rank_key(target, e.bound.estimate_qps * ratio, c.gpus), c.key)


def _seeds(order: list[Evaluation]) -> list[Evaluation]:
    """The first to screen: per policy, the best bound at the policy's middle knob (its grid's
    median: the paper's defaults sit there), so each policy's ratio is known after one wave."""
    out = []
    for family in sorted({e.candidate.family for e in order}):
        mine = [e for e in order if e.candidate.family == family]
        knobs = sorted({e.candidate.knob for e in mine})
        middle = knobs[(len(knobs) - 1) // 2]
        out.append(max((e for e in mine if e.candidate.knob == middle), key=lambda e: e.bound.estimate_qps / e.candidate.gpus))
    return out + [e for e in order if e not in out]


def run_plan(space: Space, s: PlanSettings, log: Callable[[str], None] | None = None) -> PlanRun:
    log = log or (lambda m: print(m, file=sys.stderr, flush=True))
    check_slo_reachable(space)
    target = s.target_qps
    evals = [Evaluation(c, bound_of(space, c)) for c in space.candidates]
    run = PlanRun(space, s, evals)
    any_plan = next(iter(space.plans.values()))
    search = any_plan.search
    workers = s.workers or os.cpu_count() or 1
    run.screen_requests = min(s.screen_requests, search.num_requests)  # never longer than the full probe
    # Screening probes stop once they are certain to fail (search.stop_early: the same verdicts).
    screen_plans = {c.key: fidelity(space.plan_of(c), run.screen_requests) for c in space.candidates}
    screen_plans = {k: replace(p, search=replace(p.search, stop_early=True)) for k, p in screen_plans.items()}
    for e in evals:
        if e.bound.qps <= 0:
            e.status = "pruned"
            e.needed_qps = math.inf
    order = sorted((e for e in evals if e.status == "pending"),
                   key=lambda e: (rank_key(target, e.bound.estimate_qps, e.candidate.gpus), e.candidate.key))
    executor = LocalProcessPool(1) if workers == 1 else open_executor(replace(search, workers=workers))
    with executor as pool:
        _screen(run, order, screen_plans, pool, workers, log)
        _refine(run, pool, log)
    return run


def _screen(run: PlanRun, order: list[Evaluation], plans, pool, workers: int, log) -> None:
    s, target = run.settings, run.settings.target_qps
    search = next(iter(plans.values())).search
    wave_size = 2 * workers
    pending = _seeds(order)
    while pending:
        best = _best_screened(run.evaluations, target)
        if run.waves:  # the seeds go first, as they are
            ratios = _ratios(run.evaluations)
            pending.sort(key=lambda e: _expected(e, ratios, target))
        wave: list[tuple[Evaluation, SearchTask]] = []
        while pending and len(wave) < wave_size:
            e = pending.pop(0)
            c = e.candidate
            floor, ceiling = search.min_qps, (min(e.bound.qps, search.max_qps) if s.prune else search.max_qps)
            if s.prune and best is not None:
                need = competitive_rate(target, best.screen.capacity_qps, best.candidate.gpus, c.gpus) * (1 - s.margin)
                e.needed_qps = need
                if not need <= e.bound.qps:
                    e.status = "pruned"
                    continue
                floor = max(floor, need)
            ceiling = max(ceiling, floor)
            done = [x for x in run.evaluations if x.screen is not None]
            wave.append((e, _task(e, plans[c.key], done, s, floor, ceiling)))
        if not wave:
            break
        run.waves += 1
        for i, answer in pool.map_unordered(run_search_task, [t for _, t in wave]):
            e = wave[i][0]
            e.screen = answer
            run.probes_screen += len(answer.probes)
            e.status = "screened" if answer.capacity_qps > 0 else "eliminated"
        best = _best_screened(run.evaluations, target)
        decided = sum(e.status != "pending" for e in run.evaluations)
        log(f"  screened {decided}/{len(run.evaluations)} (wave {run.waves}): best so far "
            + (f"{best.candidate.key} {best.screen.capacity_qps:.3g} QPS ({run.screen_requests} requests a probe)" if best else "none"))


def _refine(run: PlanRun, pool, log) -> None:
    s, target = run.settings, run.settings.target_qps
    screened = [e for e in run.evaluations if e.status == "screened"]
    ranked = sorted(screened, key=lambda e: (rank_key(target, e.screen.capacity_qps, e.candidate.gpus), e.candidate.key))
    chosen = ranked[:s.refine_top]
    for family in sorted({e.candidate.family for e in ranked}):
        first = next(e for e in ranked if e.candidate.family == family)
        if first not in chosen:
            chosen.append(first)
    if not chosen:
        return
    tasks = []
    for e in chosen:
        plan = run.space.plan_of(e.candidate)
        start = e.screen.capacity_qps
        ceiling = max(min(e.bound.qps, plan.search.max_qps), start) if s.prune else max(plan.search.max_qps, start)
        tasks.append(SearchTask(plan, e.candidate.scheduler, start, plan.search.min_qps, ceiling, plan.search.rel_tol,
                                REFINE_GROWTH))
    log(f"  refining {len(chosen)} candidates with the full search ({chosen[0].candidate.key} first)")
    for i, answer in pool.map_unordered(run_search_task, tasks):
        chosen[i].full = answer
        chosen[i].status = "refined"
        run.probes_full += len(answer.probes)
    rates = []
    for e in chosen:
        cap = e.full.capacity_qps
        if cap > 0:
            share = target / replicas_needed(target, cap) if target else cap
            rates.append((e, ProbeTask(run.space.plan_of(e.candidate), e.candidate.scheduler, share)))
    for i, summary in pool.map_unordered(run_rate_task, [t for _, t in rates]):
        rates[i][0].at_target = summary
        run.probes_full += 1
