"""The harness's scheduling policies inside a real vLLM: a `--scheduler-cls` plugin.

`vllm serve MODEL --scheduler-cls engines.external.vllm_scheduler.scheduler.PolicyScheduler`
with the policy named in the environment (`HARNESS_VLLM_POLICY`, JSON: `{"policy": "sarathi",
"knobs": {"token_budget": 512}}`, the same names and knobs as `scheduler=` of an experiment) runs
that policy's batches in vLLM's engine: vLLM keeps its kernels, KV manager, sampling and API
server; every step the registered policy (engines/schedulers) picks which requests compute how many
tokens, over a mirror of vLLM's requests and KV blocks (`mirror.py`). The environment carries the
policy because vLLM 0.32's `SchedulerConfig` has no field for a plugin's own settings, and the
engine-core process inherits the server's environment.

`HARNESS_VLLM_TRACE=PATH` adds the iteration trace (`trace.py`): one JSON line a step, appended to
PATH. Unset, nothing is recorded (no clock read, no record built).

This module imports neither vLLM nor the harness: the harness reads the names and builds the
environment from here; `scheduler.py` (the class vLLM loads) imports vLLM and checks its version.
"""
from __future__ import annotations

import importlib
import json
from collections.abc import Mapping

from engines.schedulers import SchedulerConfig, policy_spec

SCHEDULER_CLS = "engines.external.vllm_scheduler.scheduler.PolicyScheduler"
POLICY_ENV = "HARNESS_VLLM_POLICY"
TRACE_ENV = "HARNESS_VLLM_TRACE"
# vLLM's scheduler interface is not public and changes between releases: the releases whose
# source this adapter was read against and tested with (tests/test_vllm_scheduler_plugin.py).
SUPPORTED_VLLM = ("0.32",)


def supports(version: str) -> bool:
    """Whether vLLM `version` (its `__version__`, e.g. "0.32.0+cpu") is a supported release."""
    return any(version == v or version.startswith(v + ".") for v in SUPPORTED_VLLM)


def plugin_env(cfg: SchedulerConfig, trace_path: str | None = None) -> dict[str, str]:
    """The environment that makes a `vllm serve --scheduler-cls SCHEDULER_CLS` run `cfg`'s policy."""
    node = {"policy": cfg.policy, "knobs": dict(cfg.knobs)}
    module = policy_spec(cfg.policy).cls.__module__
    if not module.startswith("engines.schedulers."):  # a plugin policy: vLLM's Python has no entry points of ours
        node["module"] = module
    env = {POLICY_ENV: json.dumps(node)}
    if trace_path:
        env[TRACE_ENV] = trace_path
    return env


def scheduler_from_env(environ: Mapping[str, str]) -> SchedulerConfig:
    """The policy `plugin_env` put in `environ` (a plugin policy's module imported first: its
    decorator registers it); ValueError in one line when it is missing or bad."""
    raw = environ.get(POLICY_ENV)
    if not raw:
        raise ValueError(f"{SCHEDULER_CLS} needs {POLICY_ENV}, e.g. "
                         f"{POLICY_ENV}='{{\"policy\": \"sarathi\", \"knobs\": {{\"token_budget\": 512}}}}'")
    try:
        node = json.loads(raw)
        if node.get("module"):
            importlib.import_module(node["module"])
        return SchedulerConfig(node["policy"], **node.get("knobs", {}))
    except (ValueError, KeyError, TypeError, AttributeError, ImportError) as e:
        raise ValueError(f"{POLICY_ENV}={raw!r}: {e}") from None


__all__ = ["POLICY_ENV", "SCHEDULER_CLS", "SUPPORTED_VLLM", "TRACE_ENV", "plugin_env", "scheduler_from_env", "supports"]
