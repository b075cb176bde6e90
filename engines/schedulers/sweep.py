"""What the deployment planner (`python -m harness plan`) tries of a policy, declared with the
policy's registration (`register_policy(..., plan=Sweep(...))`) so the planner names no policy:

    @register_policy("sarathi", plan=Sweep(Axis("token_budget", (256, 512), "b", "budget {}"), ...))

The first axis is the knob the planner compares neighbours by (its warm starts and ratios step
along it); the others are crossed with it. An axis with no values plans nothing of the policy
unless the plan asks (`plan.grid.POLICY.KNOB=[...]`): a plugin is planned only when asked.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import product


@dataclass(frozen=True)
class Axis:
    knob: str
    values: tuple[int, ...]  # tried by default; () plans none unless the plan sets some
    tag: str  # in the scheduler's name, before the value: sarathi_b512
    label: str  # in the planner's answer, the value at {}: "budget {}"
    always: bool = True  # a crossed axis: in the name when it has several values; in the label always, or off its default


@dataclass(frozen=True)
class Sweep:
    axes: tuple[Axis, ...]
    fixed: Mapping[str, object] = field(default_factory=dict)  # knobs every grid node sets (its config as written)
    title: str | None = None  # the answer's name of the policy; None: the figures' (harness.analysis.style)
    prefill: str | None = None  # a P/D unit's prefill role, the first axis's value at {}; None: not a prefill role

    def __init__(self, *axes: Axis, fixed: Mapping[str, object] | None = None, title: str | None = None,
                 prefill: str | None = None) -> None:
        if not axes:
            raise ValueError("Sweep needs at least one Axis")
        object.__setattr__(self, "axes", tuple(axes))
        object.__setattr__(self, "fixed", dict(fixed or {}))
        object.__setattr__(self, "title", title)
        object.__setattr__(self, "prefill", prefill)

    @property
    def knob(self) -> str:
        """The knob the planner steps along (Candidate.knob)."""
        return self.axes[0].knob

    def values(self, given: Mapping[str, list[int]]) -> tuple[tuple[int, ...], ...]:
        """Each axis's values: the plan's (`given`, by knob), else the declared ones."""
        return tuple(tuple(int(v) for v in given.get(a.knob, a.values)) for a in self.axes)

    def nodes(self, policy: str, given: Mapping[str, list[int]]) -> dict[str, dict]:
        """The grid's `scheduler.NAME` config nodes of `policy`, by name (crossed axes outermost,
        the first axis innermost)."""
        values = self.values(given)
        first, rest = values[0], values[1:]
        out = {}
        for crossed in product(*rest) if first else ():
            for v in first:
                name = f"{policy}_{self.axes[0].tag}{v}" + "".join(
                    f"_{a.tag}{c}" for a, c, vs in zip(self.axes[1:], crossed, rest) if len(vs) > 1)
                out[name] = {"policy": policy, self.knob: v,
                             **{a.knob: c for a, c in zip(self.axes[1:], crossed)}, **self.fixed}
        return out

    def describe(self, title: str, knobs: Mapping[str, object], defaults: Mapping[str, object]) -> str:
        """`Sarathi-Serve budget 512, batch 64`: the title, the first axis, the crossed ones shown."""
        first = f"{self.title or title} {self.axes[0].label.format(knobs[self.knob])}"
        return first + "".join(f", {a.label.format(knobs[a.knob])}" for a in self.axes[1:]
                               if a.always or knobs[a.knob] != defaults.get(a.knob))
