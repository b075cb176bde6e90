"""The plan's answer: candidates ranked by GPUs for the target (then capacity per GPU), each with
its capacity, replicas, latency at a replica's share of the target and cost per million output
tokens; the winner; or one line saying nothing meets the request and what would."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from common.errors import HarnessError
from engines.schedulers import policy_spec
from harness.analysis.style import scheduler_label
from harness.planner.replicas import gpus_needed, rank_key, replicas_needed
from harness.planner.search import Evaluation, PlanRun


@dataclass(frozen=True)
class Row:
    rank: int
    key: str
    deployment: str  # TP4-PP2, 8 GPUs
    scheduler: str  # Sarathi-Serve budget 512
    policy: str
    gpus_per_replica: int
    capacity_qps: float
    capacity_per_gpu: float
    replicas: int | None
    gpus: int | None
    ttft_p50_s: float | None  # at a replica's share of the target
    tbt_p99_s: float | None
    cost_per_m_tokens: float | None
    measured: str  # full (search.num_requests a probe) | screen (plan.screen_requests)
    ttft_p99_s: float | None = None  # at a replica's share of the target, beside the criterion
    starvation: str = ""  # the capacity probe's signs of starvation (harness.starvation), "" if none


def describe_scheduler(e: Evaluation, plan) -> str:
    """`Sarathi-Serve budget 512`: as the policy's sweep labels it (register_policy(plan=...))."""
    sc = plan.schedulers[e.candidate.scheduler]
    spec = policy_spec(sc.policy)
    knobs = dict(sc.knobs)
    if e.candidate.unit is not None:  # the prefill role's policy; the decode role keeps max_num_seqs
        what = spec.plan.prefill.format(knobs[spec.plan.knob])
        return f"P: {scheduler_label(sc.policy)} {what}, D: batch {sc.max_num_seqs}"
    return spec.plan.describe(scheduler_label(sc.policy), knobs, {k.name: k.default for k in spec.knobs})


def describe_deployment(tp: int, pp: int, unit=None, dp: int = 1) -> str:
    """TP-2 (2 GPUs); DP2xTP-1 + EP (2 GPUs); a P/D unit as its layout, 2P(tp2):1D(tp2) (6 GPUs)."""
    gpus = unit.gpus if unit is not None else tp * pp * dp
    shape = unit.layout if unit is not None else (f"TP{tp}-PP{pp}" if pp > 1 else f"TP-{tp}")
    if dp > 1 and unit is None:
        shape = f"DP{dp}x{shape} + EP"
    return f"{shape} ({gpus} GPU{'s' if gpus > 1 else ''})"


def ranked(run: PlanRun) -> list[Evaluation]:
    """Refined candidates by rank, then the others screened with a capacity (their screen's)."""
    target = run.settings.target_qps

    def key(e: Evaluation) -> tuple:
        return (e.full is None, rank_key(target, e.capacity_qps, e.candidate.gpus), e.candidate.key)

    return sorted((e for e in run.evaluations if e.capacity_qps > 0), key=key)


def rows(run: PlanRun, limit: int | None = None) -> list[Row]:
    target = run.settings.target_qps
    plan0 = next(iter(run.space.plans.values()))  # each row's cost: dollars per million output tokens of its GPUs
    price, tokens = run.settings.prices.get(plan0.deployment.gpu), float(np.mean(plan0.workload.output_lens))
    out = []
    for i, e in enumerate(ranked(run)[:limit], start=1):
        c, cap = e.candidate, e.capacity_qps
        plan = run.space.plan_of(c)
        reps = replicas_needed(target, cap) if target else 1
        gpus = gpus_needed(target, cap, c.gpus) if target else c.gpus
        at_cap = (e.full or e.screen).at_capacity
        at = e.at_target or (at_cap if not target else None)
        served = target or cap
        cost = None if None in (price, gpus) or not served > 0 else gpus * price / (served * tokens * 3600) * 1e6
        out.append(Row(i, c.key, describe_deployment(c.tp, c.pp, c.unit, c.dp), describe_scheduler(e, plan), c.policy, c.gpus, cap,
                       cap / c.gpus, reps, gpus, at.ttft_p50_s if at else None, at.tbt_s if at else None,
                       cost, "full" if e.full is not None else "screen", at.ttft_p99_s if at else None,
                       at_cap.starvation if at_cap else ""))
    return out


def winner(run: PlanRun) -> Evaluation:
    """The best refined candidate within the fleet limit; one line (HarnessError) when there is none."""
    s = run.settings
    plan = next(iter(run.space.plans.values()))
    refined = [e for e in ranked(run) if e.full is not None]
    if not refined:
        raise HarnessError(_nothing_meets(run, plan))
    best = refined[0]
    if s.target_qps and s.max_total_gpus:
        need = gpus_needed(s.target_qps, best.capacity_qps, best.candidate.gpus)
        if need > s.max_total_gpus:
            most = max(s.max_total_gpus // e.candidate.gpus * e.capacity_qps for e in refined)
            raise HarnessError(
                f"target_qps={s.target_qps:g} needs {need} GPUs at best ({best.candidate.key}, {best.capacity_qps:.3g} QPS a "
                f"replica), over plan.max_total_gpus={s.max_total_gpus}: more GPUs (plan.max_total_gpus={need}) or a looser "
                f"SLO; {s.max_total_gpus} GPUs serve at most {most:.3g} QPS under {plan.slo.describe()}")
    return best


def _nothing_meets(run: PlanRun, plan) -> str:
    tried = [(p.tbt_s, p.qps, e.candidate.key) for e in run.evaluations for a in (e.screen, e.full) if a for p in a.probes]
    slo = plan.slo
    what = slo.describe()
    if not tried:
        return f"nothing meets {what}: every configuration's bound rules it out; a looser SLO or more GPUs (plan.max_gpus)"
    if slo.criterion != "paper":
        return f"nothing meets {what} at any rate tried; a looser SLO (slo.ttft_s, slo.tpot_s) or more GPUs per replica (plan.max_gpus)"
    tbt, qps, key = min(tried)
    return (f"nothing meets {what} at any rate tried (the lowest P{slo.tbt_quantile * 100:g} TBT seen: {tbt:.3g} s, "
            f"{key} at {qps:.3g} QPS); a looser SLO (slo.tbt_s >= {math.ceil(tbt * 1000) / 1000:g}) or more GPUs "
            f"per replica (plan.max_gpus)")


def _fmt(x: float | None, spec: str, unit: str = "") -> str:
    return "-" if x is None else f"{x:{spec}}{unit}"


HEADER = ("#", "deployment", "scheduler", "QPS/replica", "QPS/GPU", "replicas", "GPUs", "P50 TTFT", "P99 TBT", "P99 TTFT",
          "$/M tok", "")


def table_lines(table: list[Row]) -> list[str]:
    """The ranked table as aligned text (the same cells as the markdown)."""
    cells = [HEADER] + [_cells(r) for r in table]
    widths = [max(len(row[i]) for row in cells) for i in range(len(HEADER))]
    return ["  ".join(v.ljust(w) if i in (1, 2) else v.rjust(w) for i, (v, w) in enumerate(zip(row, widths))).rstrip()
            for row in cells]


def table_markdown(table: list[Row]) -> str:
    lines = ["| " + " | ".join(HEADER[:-1] + ("measured",)) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(_cells(r)[:-1] + (r.measured,)) + " |" for r in table]
    return "\n".join(lines) + "\n"


def _cells(r: Row) -> tuple[str, ...]:
    return (str(r.rank), r.deployment, r.scheduler, f"{r.capacity_qps:.3g}" + ("!" if r.starvation else ""),
            f"{r.capacity_per_gpu:.3g}", _fmt(r.replicas, "d"), _fmt(r.gpus, "d"), _fmt(r.ttft_p50_s, ".3f", " s"),
            _fmt(r.tbt_p99_s, ".3f", " s"), _fmt(r.ttft_p99_s, ".3g", " s"), _fmt(r.cost_per_m_tokens, ".2f"),
            "" if r.measured == "full" else "(screen)")


def starved_lines(table: list[Row]) -> list[str]:
    """A WARNING per ranked configuration whose capacity probe looks starved ("!" in the table)."""
    return [f"WARNING: #{r.rank} {r.key} passes the criterion at its capacity but looks starved: {r.starvation} "
            "(harness/starvation.py; its capacity stays the criterion's)" for r in table if r.starvation]
