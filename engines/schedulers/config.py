"""A scheduler's settings: a registered policy's name and its knobs (the policy's constructor
parameters, engines/schedulers/registry.py), every knob filled in with its default."""
from __future__ import annotations

from engines.core.config import PER_SCHEDULER
from engines.schedulers.registry import policy_spec


class SchedulerConfig:
    """`SchedulerConfig("sarathi", token_budget=1024)`: ValueError names an unknown policy, an
    unknown knob or a missing required one; the policy's constructor checks the values
    (`make_policy`). A knob reads as an attribute (`cfg.token_budget`); `knobs` holds them all."""

    __slots__ = ("policy", "knobs")

    def __init__(self, policy: str, **knobs: object) -> None:
        filled = policy_spec(policy).fill(knobs)
        object.__setattr__(self, "policy", policy)
        object.__setattr__(self, "knobs", filled)

    @classmethod
    def shared(cls, policy: str, **knobs: object) -> SchedulerConfig:
        """The policy with those of `knobs` it has (a sweep over policies with common settings:
        tests, benchmarks); a None for a knob the policy does not let be None keeps its default
        (vllm's max_num_batched_tokens=None means max_model_len; vllm_v1's is a number); a config
        read from a user keeps the strict constructor."""
        engine_settings = sorted(set(knobs) & set(PER_SCHEDULER))
        if engine_settings:  # filtered out silently, a sweep would run without the cache it asked for
            raise ValueError(f"{', '.join(engine_settings)}: an engine setting (engines.core.EngineConfig), "
                             "not a scheduler knob")
        takes = {k.name: k.optional for k in policy_spec(policy).knobs}
        return cls(policy, **{k: v for k, v in knobs.items() if k in takes and (v is not None or takes[k])})

    def __getattr__(self, name: str):
        if name in SchedulerConfig.__slots__ or name.startswith("__"):
            raise AttributeError(name)
        for key, value in self.knobs:
            if key == name:
                return value
        raise AttributeError(f"policy {self.policy!r} has no knob {name!r}")

    def __setattr__(self, name, value):
        raise AttributeError("SchedulerConfig is immutable")

    def as_dict(self) -> dict[str, object]:
        """The config node that gives back this scheduler: `policy` and every knob."""
        return {"policy": self.policy, **dict(self.knobs)}

    def __eq__(self, other) -> bool:
        return isinstance(other, SchedulerConfig) and (self.policy, self.knobs) == (other.policy, other.knobs)

    def __hash__(self) -> int:
        return hash((self.policy, self.knobs))

    def __repr__(self) -> str:
        return f"SchedulerConfig({self.policy!r}, " + ", ".join(f"{k}={v!r}" for k, v in self.knobs) + ")"

    def __reduce__(self):  # pickled to probe workers as it is, without looking the policy up again
        return (_restore, (self.policy, self.knobs))


def _restore(policy: str, knobs: tuple) -> SchedulerConfig:
    cfg = object.__new__(SchedulerConfig)
    object.__setattr__(cfg, "policy", policy)
    object.__setattr__(cfg, "knobs", knobs)
    return cfg
