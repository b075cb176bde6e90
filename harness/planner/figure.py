"""The plan's Pareto figure: capacity per GPU against the P99 TBT at that capacity, one colour per
scheduler; filled markers were measured with the full search, hollow ones only screened, crosses
were ruled out (drawn at the rate they failed to reach); the front and the winner marked."""
from __future__ import annotations

from pathlib import Path

from harness.analysis import style
from harness.planner.search import Evaluation, PlanRun


def pareto_front(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other beats on both axes (lower TBT, higher capacity per GPU), by TBT."""
    front, best = [], -1.0
    for tbt, per_gpu in sorted(points, key=lambda p: (p[0], -p[1])):
        if per_gpu > best:
            front.append((tbt, per_gpu))
            best = per_gpu
    return front


def _point(e: Evaluation) -> tuple[float, float] | None:
    answer = e.full or e.screen
    at = answer.at_capacity if answer is not None else None
    return None if at is None else (at.tbt_s, answer.capacity_qps / e.candidate.gpus)


def draw(run: PlanRun, win: Evaluation, path: Path, title: str) -> Path:
    fig, axes = style.new_figure(1, width=6.0, height=4.2)
    ax = axes[0][0]
    slo = next(iter(run.space.plans.values())).slo.tbt_s
    points = []
    planned = {e.candidate.policy for e in run.evaluations}  # a policy the figures do not know (a plugin) comes last
    for policy in style.SCHEDULER_ORDER + tuple(sorted(planned - set(style.SCHEDULER_ORDER))):
        mine = [e for e in run.evaluations if e.candidate.policy == policy]
        if not mine:
            continue
        color, label = style.scheduler_color(policy), style.scheduler_label(policy)
        full = [p for e in mine if e.full is not None and (p := _point(e))]
        screen = [p for e in mine if e.full is None and (p := _point(e))]
        out = [(slo, e.needed_qps / e.candidate.gpus) for e in mine if e.status == "eliminated" and e.needed_qps]
        points += full + screen
        if full:
            ax.scatter(*zip(*full), color=color, s=36, label=f"{label}", zorder=3)
        if screen:
            ax.scatter(*zip(*screen), facecolors="none", edgecolors=color, s=30,
                       label=None if full else f"{label} (screened)", zorder=2)
        if out:
            ax.scatter(*zip(*out), marker="x", color=color, s=18, alpha=0.5,
                       label=None if (full or screen) else f"{label} (ruled out)", zorder=1)
    front = pareto_front(points)
    if len(front) > 1:
        ax.step(*zip(*front), where="post", color="0.3", lw=1, ls="--", label="Pareto front", zorder=1)
    w = _point(win)
    if w:
        ax.scatter([w[0]], [w[1]], marker="*", s=220, color="gold", edgecolors="black", zorder=4, label="winner")
    ax.axvline(slo, color="0.5", lw=0.8, ls=":")
    ax.set(xlabel="P99 TBT at capacity (s)", ylabel="capacity per GPU (QPS)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="best")
    return style.save(fig, path)  # closes the figure, saved or not
