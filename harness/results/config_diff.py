"""Two resolved configs (plain nested dicts) compared setting by setting.

One comparison for two questions: has this exact config already run (commands.jobs: everything
but where output goes must agree) and is a saved run at its paper cell's settings
(analysis.settings: what is measured must agree). A key only one side has is a field added (or
retired) since the other was saved: a run made before a knob existed ran as its default does, so
it is not a difference.
"""
from __future__ import annotations

from collections.abc import Collection, Mapping


def flatten(cfg: Mapping, prefix: str = "") -> dict[str, object]:
    """{"search.num_requests": 2048, ...}; lists are kept whole (compared as values)."""
    out: dict[str, object] = {}
    for k, v in cfg.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, f"{key}."))
        else:
            out[key] = v
    return out


def differences(a: Mapping, b: Mapping, ignored: Collection[str] = (), other: str = "vs") -> tuple[str, ...]:
    """The settings both configs have and that differ, each as "key=value_a (<other>: value_b)";
    keys in `ignored`, or under a group in it ("backend", "search.workers"), are not compared."""
    fa, fb = flatten(a), flatten(b)
    keys = sorted(k for k in fa.keys() & fb.keys()
                  if not any(".".join(k.split(".")[:i]) in ignored for i in range(1, k.count(".") + 2))
                  and fa[k] != fb[k])
    return tuple(f"{k}={fa[k]} ({other}: {fb[k]})" for k in keys)
