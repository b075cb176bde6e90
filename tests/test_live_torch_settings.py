"""The live backend selects the torch executor's speed paths: `backend.torch.{attention_backend,
cuda_graphs,compile_elementwise}` reach LiveServerSpec and the in-repo server's command line (and
parse back to the same ServerConfig); settings that the server would refuse, or that a server
without the torch executor would ignore, are refused before anything starts."""
from __future__ import annotations

import argparse
import dataclasses

import pytest

from common.errors import HarnessError
from engines.schedulers import SchedulerConfig
from engines.server.config import ServerConfig, add_flags, from_flags
from harness.backends.live import LiveServerSpec, server_spec
from harness.config import compose, plan_experiment


def _spec(*overrides: str) -> LiveServerSpec:
    cfg = compose(["experiment=live_smoke", "progress=false", *overrides])
    return server_spec(plan_experiment(cfg).job("sarathi", progress=False))


def _parsed(spec: LiveServerSpec):
    parser = argparse.ArgumentParser()
    add_flags(parser)
    command = spec.command(8123)
    return from_flags(parser.parse_args(command[command.index("engines.server") + 1:]))


def test_torch_settings_reach_the_servers_flags():
    spec = _spec("backend.executor=torch", "backend.torch.attention_backend=flex", "backend.torch.cuda_graphs=true",
                 "backend.torch.compile_elementwise=true")
    assert (spec.config.attention_backend, spec.config.cuda_graphs, spec.config.compile_elementwise) == ("flex", True, True)
    cfg = _parsed(spec)
    assert (cfg.executor, cfg.attention_backend, cfg.cuda_graphs, cfg.compile_elementwise) == ("torch", "flex", True, True)
    assert cfg == spec.server_config(8123)
    off = _parsed(_spec("backend.executor=torch", "backend.torch.attention_backend=sdpa"))
    assert (off.attention_backend, off.cuda_graphs, off.compile_elementwise) == ("sdpa", False, False)


def test_defaults_are_the_servers_and_any_executor_takes_them():
    spec = _spec()
    assert (spec.config.executor, spec.config.attention_backend, spec.config.cuda_graphs, spec.config.compile_elementwise) == (
        "realtime", "auto", False, False)


@pytest.mark.parametrize("overrides,message", [
    (["backend.torch.cuda_graphs=true", "backend.torch.attention_backend=flex"], "executor realtime"),
    (["backend.executor=torch", "backend.torch.cuda_graphs=true"], "needs backend.torch.attention_backend=flex"),
    (["backend.executor=torch", "backend.torch.cuda_graphs=true", "backend.torch.attention_backend=sdpa"], "'sdpa'"),
])
def test_settings_the_server_would_refuse_or_ignore_are_refused(overrides, message):
    with pytest.raises(HarnessError, match=message):
        _spec(*overrides)


def test_a_vllm_server_takes_no_torch_paths():
    base = LiveServerSpec(kind="vllm", scheduler=SchedulerConfig("sarathi"), model="m", max_model_len=512)
    with pytest.raises(HarnessError, match="vllm"):
        dataclasses.replace(base, config=ServerConfig(executor="torch", attention_backend="flex"))
