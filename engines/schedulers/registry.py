"""The policy registry: the one place a scheduling policy is declared.

A policy is a class registered under a name with a decorator:

    @register_policy("shortest_prompt_first")
    class ShortestPromptFirstPolicy(SarathiPolicy): ...

Its constructor's parameters are its knobs: name, type annotation (int, float, bool, str, or one
of them | None) and default (none: the config must set it). Everything that configures a policy
is derived from them: `SchedulerConfig`'s checks, the Hydra structured config of
`scheduler=NAME` (harness/config/schema.py; a YAML under experiments/scheduler/ is optional, a
preset over that schema), the in-repo server's flags (engines/server/config.py). A parameter
named `max_model_len` is not a knob: the engine passes the deployment's. `fixed` arguments of a
registration are pinned (one class, two names: hybrid_only is SarathiPolicy without chunking);
`plan=Sweep(...)` says what the deployment planner tries of it (engines/schedulers/sweep.py).

A policy in another package registers the same way and is found through the entry-point group
`sarathi_harness.policies` (ENTRY_POINTS): its module is imported when a policy is first looked
up, which runs its decorator. The rules a policy keeps are in ARCHITECTURE.md ("Policies").
"""
from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import metadata

from engines.core.config import PER_SCHEDULER
from engines.core.policy import Policy, missing_members
from engines.schedulers.sweep import Sweep

ENTRY_POINTS = "sarathi_harness.policies"
CONTEXT = ("max_model_len",)  # constructor parameters the engine fills, never knobs
KNOB_TYPES = (int, float, bool, str)
VLLM_MODES = ("chunked_prefill", "whole_prompts")  # engines/external/vllm.py: what `vllm serve` can run


class Required:
    """The default of a knob the config must set."""

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED = Required()


@dataclass(frozen=True)
class Knob:
    name: str
    kind: type  # one of KNOB_TYPES
    optional: bool  # the annotation allows None
    default: object  # REQUIRED when the constructor has none


@dataclass(frozen=True)
class PolicySpec:
    name: str
    cls: type
    knobs: tuple[Knob, ...]
    fixed: Mapping[str, object] = field(default_factory=dict)
    # The closest `vllm serve` scheduler (VLLM_MODES), declared by the registration, never
    # inherited: a subclass that reorders admission is not what vLLM runs. None: not expressible.
    vllm: str | None = None
    doc: str = ""
    # What the deployment planner tries of it (engines/schedulers/sweep.py), declared by the
    # registration, never inherited. None: the planner never tries it.
    plan: Sweep | None = None

    @property
    def knob_names(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.knobs)

    def fill(self, given: Mapping[str, object]) -> tuple[tuple[str, object], ...]:
        """Every knob's value: `given`, else the default (ValueError names an unknown or missing knob)."""
        unknown = [k for k in given if k not in self.knob_names]
        if unknown:
            raise ValueError(f"policy {self.name} has no knob {unknown[0]!r}; its knobs: {', '.join(self.knob_names) or 'none'}")
        out = []
        for k in self.knobs:
            value = given.get(k.name, k.default)
            if value is REQUIRED:
                raise ValueError(f"policy {self.name}: knob {k.name!r} has no default and must be set")
            out.append((k.name, value))
        return tuple(out)

    def build(self, knobs: Mapping[str, object], max_model_len: int) -> Policy:
        """The policy object (its constructor checks the values; TypeError names what of the
        Policy protocol it lacks: subclass engines.core.BasePolicy for the defaults)."""
        context = {"max_model_len": max_model_len} if "max_model_len" in _parameters(self.cls) else {}
        policy = self.cls(**knobs, **self.fixed, **context)
        missing = missing_members(policy)
        if missing:
            raise TypeError(f"policy {self.name}: {self.cls.__qualname__} lacks {', '.join(missing)} of engines.core.Policy "
                            "(subclass engines.core.BasePolicy for its defaults)")
        return policy


_REGISTRY: dict[str, PolicySpec] = {}
_plugins_loaded = False
_plugin_errors: list[str] = []  # entry points that failed to load: named when a lookup fails


def register_policy(name: str, *, vllm: str | None = None, plan: Sweep | None = None, **fixed) -> Callable[[type], type]:
    """Class decorator: register the class as policy `name` (see the module docstring)."""
    if vllm is not None and vllm not in VLLM_MODES:
        raise ValueError(f"register_policy({name!r}): vllm must be one of {', '.join(VLLM_MODES)} or None, got {vllm!r}")

    def decorate(cls: type) -> type:
        params = _parameters(cls)
        stray = [k for k in fixed if k not in params]
        if stray:
            raise TypeError(f"register_policy({name!r}): {cls.__qualname__} takes no parameter {stray[0]!r}")
        knobs = tuple(_knob(cls, p) for n, p in params.items() if n not in fixed and n not in CONTEXT)
        shadowed = [k.name for k in knobs if k.name in PER_SCHEDULER]
        if shadowed:  # a scheduler's entry sets it for the engine (engines/core/config.py): the policy would never see it
            raise TypeError(f"register_policy({name!r}): {cls.__qualname__}'s knob {shadowed[0]!r} is the engine's "
                            "setting (engines.core.EngineConfig), not a policy's; name it otherwise")
        doc = (inspect.getdoc(cls) or "").split("\n\n")[0].replace("\n", " ")
        spec = PolicySpec(name, cls, knobs, dict(fixed), vllm, doc, plan)
        _check_sweep(spec)
        old = _REGISTRY.get(name)
        if old is not None and _origin(old.cls) != _origin(cls):
            raise ValueError(f"policy {name!r} is registered twice: {_origin(old.cls)} and {_origin(cls)}")
        _REGISTRY[name] = spec
        return cls

    return decorate


def policy_spec(name: str) -> PolicySpec:
    if name not in _REGISTRY:
        load_plugins()
    if name not in _REGISTRY:
        broken = "".join(f"; {e}" for e in _plugin_errors)
        raise ValueError(f"unknown scheduler policy {name!r}; known: {', '.join(policy_names())}{broken}")
    return _REGISTRY[name]


def policy_names() -> tuple[str, ...]:
    """Every registered policy, plugins included, in registration order."""
    load_plugins()
    return tuple(_REGISTRY)


def plugin_errors() -> tuple[str, ...]:
    """Why each policy plugin that failed to load did (after load_plugins)."""
    return tuple(_plugin_errors)


def load_plugins() -> None:
    """Import every module the `sarathi_harness.policies` entry points name (once). An entry point
    naming a class that did not register itself is registered under the entry point's name. One
    that fails to load is remembered (a lookup of an unknown name says why), not raised: the other
    policies stay usable."""
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for ep in metadata.entry_points(group=ENTRY_POINTS):
        try:
            obj = ep.load()
            if inspect.isclass(obj) and not any(s.cls is obj for s in _REGISTRY.values()):
                register_policy(ep.name)(obj)
        except Exception as e:  # a broken plugin names itself, not a traceback from deep inside
            _plugin_errors.append(f"policy plugin {ep.name} ({ep.value}) failed to load: {type(e).__name__}: {e}")


def _parameters(cls: type) -> dict[str, inspect.Parameter]:
    params = dict(inspect.signature(cls.__init__).parameters)
    params.pop("self", None)
    bad = [p.name for p in params.values() if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if bad:
        raise TypeError(f"{cls.__qualname__}: *args/**kwargs ({bad[0]}) cannot be knobs; name every parameter")
    return params


def _knob(cls: type, p: inspect.Parameter) -> Knob:
    hint = typing.get_type_hints(cls.__init__).get(p.name)
    args = typing.get_args(hint)
    optional = type(None) in args
    kinds = [a for a in args if a is not type(None)] if args else [hint]
    if len(kinds) != 1 or kinds[0] not in KNOB_TYPES:
        raise TypeError(f"{cls.__qualname__}: knob {p.name!r} needs a type annotation of "
                        f"int, float, bool or str (or one of them | None), got {hint!r}")
    default = REQUIRED if p.default is inspect.Parameter.empty else p.default
    return Knob(p.name, kinds[0], optional, default)


def _check_sweep(spec: PolicySpec) -> None:
    """A planned knob is one of the policy's int knobs (TypeError names it at registration)."""
    if spec.plan is None:
        return
    kinds = {k.name: k.kind for k in spec.knobs}
    for knob in [a.knob for a in spec.plan.axes] + list(spec.plan.fixed):
        if knob not in kinds or (knob not in spec.plan.fixed and kinds[knob] is not int):
            raise TypeError(f"register_policy({spec.name!r}): plan sweeps {knob!r}, not an int knob of "
                            f"{spec.cls.__qualname__} ({', '.join(spec.knob_names)})")


def _origin(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def require_positive(**knobs: int | None) -> None:
    """A constructor's check of its count knobs (None passes: "not set")."""
    for name, value in knobs.items():
        if value is not None and value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
